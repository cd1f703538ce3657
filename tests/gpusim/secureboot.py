"""UEFI Secure Boot on a simulated node (issue 24): the spec key, who signed the driver's modules, the kernel's verdict.

Spec (nodes[i].secure_boot)::

    secure_boot: {enabled: true, enrolled: [<certificate SHA1, 40 hex>, {sha1: <40 hex>, cn: "My MOK"}]}

becomes the node state's ``stack.secure_boot`` = ``{"enabled", "keys": [{"sha1", "cn"}]}`` that ``mokutil`` answers from
(tools/stack.py). The driver's modules carry ``driver["signature"]`` = ``{"sha1", "cn", "serial"}`` of the certificate
that signed them, or None: the runfile installer signs with ``--module-signing-secret-key`` / ``--module-signing-public-key``,
DKMS (packages, the runfile with ``--dkms``) with the pair ``mok_signing_key`` / ``mok_certificate`` of
``/etc/dkms/framework.conf`` and ``framework.conf.d/*.conf`` (the node's own /etc), else with the key it generates itself,
never enrolled. With Secure Boot enabled the kernel refuses a module signed by a key that is not enrolled (modprobe ``Key
was rejected by service``, kernel ``Loading of module with unavailable key is rejected``) and an unsigned one (lockdown:
``Operation not permitted``), the messages of ../shared/fixtures/real/stack/secureboot/.

Runs under ``python -I -S`` (no site-packages): the certificate is read with a few lines of DER, not a library; hashlib
and base64 are imported only when a certificate is read (a tool's start-up stays light: test_tool_startup, test_xml_escape).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The pair DKMS generates when none is configured (README: "DKMS will re-create both files"): nobody enrolled it.
DKMS_OWN_KEY = {"sha1": "0346f2f1fa3e8f60f7be58762fc5feabb363580e", "cn": "DKMS module signing key", "serial": "5D:4B"}
DKMS_CONF = ("/etc/dkms/framework.conf", "/etc/dkms/framework.conf.d")
DKMS_DEFAULT_PAIR = ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")
REJECTED = ("Key was rejected by service", "Loading of module with unavailable key is rejected")
UNSIGNED = ("Operation not permitted", "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7")
INSTALLER_UNTRUSTED = (
    "ERROR: The kernel module failed to load, because it was not signed by a key that is trusted by the kernel. Please try "
    "installing the driver again, and sign the kernel module when prompted to do so.\n\nERROR: Unable to load the kernel module "
    "'nvidia.ko'.  This happens most frequently when this kernel module was built against the wrong or improperly configured "
    "kernel sources, with a version of gcc that differs from the one used to build the target kernel, or if another driver, such "
    "as nouveau, is present and prevents the NVIDIA kernel module from obtaining ownership of the NVIDIA GPU(s), or no NVIDIA GPU"
)
_SHA1 = re.compile(r"[0-9a-fA-F:]{40,59}")
_CONF_LINE = re.compile(r"""^\s*(mok_signing_key|mok_certificate)=["']?([^"'\n]*)["']?\s*$""", re.MULTILINE)
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)
_CN_OID = bytes.fromhex("0603550403")


def spec_value(value: Any, where: str) -> dict[str, Any]:
    """nodes[i].secure_boot checked: ``{"enabled": bool, "enrolled": [{"sha1", "cn"}]}``; ValueError naming ``where``."""
    if not isinstance(value, dict) or set(value) - {"enabled", "enrolled"}:
        raise ValueError(f"{where}: must be a mapping with enabled (true/false) and enrolled (a list of certificate SHA1s)")
    if not isinstance(value.get("enabled"), bool):
        raise ValueError(f"{where}.enabled: must be true or false, got {value.get('enabled')!r}")
    keys = []
    for index, given in enumerate(value.get("enrolled") or []):
        entry = given if isinstance(given, dict) else {"sha1": given}
        sha1 = str(entry.get("sha1", "")).replace(":", "").lower()
        if not _SHA1.fullmatch(str(entry.get("sha1", ""))) or len(sha1) != 40:
            raise ValueError(f"{where}.enrolled[{index}]: must be a certificate's SHA1 fingerprint (40 hex digits) or {{sha1, cn}}")
        keys.append({"sha1": sha1, "cn": str(entry.get("cn") or "gpusim enrolled key")})
    return {"enabled": value["enabled"], "enrolled": keys}


def init(state: dict[str, Any], value: dict[str, Any]) -> None:
    """The node state's ``stack.secure_boot`` from a checked spec value; the driver the spec installs was signed by an enrolled
    key (a node that boots today loads its driver)."""
    state.setdefault("stack", {})["secure_boot"] = {"enabled": value["enabled"], "keys": [dict(k) for k in value["enrolled"]]}
    if state["driver"].get("version"):
        first = (value["enrolled"] or [None])[0]
        state["driver"]["signature"] = {"sha1": first["sha1"], "cn": first["cn"], "serial": "01"} if first else None


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int):
    while start < end:
        tag, content, stop = _tlv(data, start)
        yield tag, content, stop
        start = stop


def certificate(path: str | None) -> dict[str, Any] | None:
    """``{"sha1", "cn", "serial"}`` of the certificate at ``path`` (DER or PEM: what sign-file accepts); None when unreadable."""
    import base64
    import hashlib

    try:
        data = Path(path).read_bytes() if path else b""
    except OSError:
        return None
    match = _PEM.search(data.decode("latin-1"))
    if match:
        data = base64.b64decode("".join(match.group(1).split()))
    try:
        _t, cert_start, _e = _tlv(data, 0)
        _t, tbs_start, tbs_end = _tlv(data, cert_start)
        fields = [f for f in _children(data, tbs_start, tbs_end)]
        if fields[0][0] == 0xA0:
            fields = fields[1:]
        serial = data[fields[0][1] : fields[0][2]].lstrip(b"\0") or b"\0"
        cn = None
        for _s, set_start, set_end in _children(data, fields[2][1], fields[2][2]):  # the issuer: what modinfo prints as signer
            for _q, seq_start, _q_end in _children(data, set_start, set_end):
                if data[seq_start : seq_start + 5] == _CN_OID:
                    _v, value_start, value_end = _tlv(data, seq_start + 5)
                    cn = data[value_start:value_end].decode("utf-8", "replace")
    except (IndexError, ValueError):
        return None
    return {"sha1": hashlib.sha1(data).hexdigest(), "cn": cn or "", "serial": ":".join(f"{b:02X}" for b in serial)}  # noqa: S324


def _is_private_key(path: str | None) -> bool:
    try:
        return bool(path) and b"PRIVATE KEY-----" in Path(path).read_bytes()
    except OSError:
        return False


def dkms_signing_pair(etc: str | None = None) -> tuple[str, str]:
    """The (mok_signing_key, mok_certificate) paths DKMS's configuration names, its default pair where none does."""
    key, cert = DKMS_DEFAULT_PAIR
    root = Path(etc or os.environ.get("GPUSIM_ETC_ROOT") or "/")
    files = [root / DKMS_CONF[0].lstrip("/")]
    folder = root / DKMS_CONF[1].lstrip("/")
    if folder.is_dir():
        files += sorted(folder.glob("*.conf"))
    for conf in files:
        try:
            text = conf.read_text()
        except OSError:
            continue
        for name, value in _CONF_LINE.findall(text):
            key, cert = (value, cert) if name == "mok_signing_key" else (key, value)
    return key, cert


def dkms_signature(etc: str | None = None) -> dict[str, Any]:
    """Who DKMS signs with: its framework.conf pair when both files are there, else a pair it generates (never enrolled).

    ``etc``: the root the node's /etc is read under; "/" on a simulated node (its own /etc), GPUSIM_ETC_ROOT in unit tests."""
    key, cert = dkms_signing_pair(etc)
    signed = certificate(cert) if _is_private_key(key) else None
    return signed or dict(DKMS_OWN_KEY)


def runfile_signature(key: str | None, cert: str | None, dkms: bool) -> dict[str, Any] | None:
    """nvidia-installer: the pair given signs the modules; else DKMS signs what it builds (--dkms); else they stay unsigned."""
    if key or cert:
        return certificate(cert) if _is_private_key(key) else None
    return dkms_signature() if dkms else None


def refusal(state: dict[str, Any]) -> tuple[str, str] | None:
    """``(modprobe's error, the kernel's log line)`` when Secure Boot refuses the driver's modules, else None."""
    secure_boot = (state.get("stack") or {}).get("secure_boot") or {}
    if not secure_boot.get("enabled"):
        return None
    signature = (state.get("driver") or {}).get("signature")
    if not signature:
        return UNSIGNED
    if any(key["sha1"] == signature["sha1"] for key in secure_boot.get("keys") or []):
        return None
    return REJECTED


def modinfo_lines(signature: dict[str, Any] | None) -> list[tuple[str, str]]:
    """modinfo's signature lines (after vermagic), none for an unsigned module."""
    if not signature:
        return []
    return [("sig_id", "PKCS#7"), ("signer", signature["cn"]), ("sig_key", signature["serial"]), ("sig_hashalgo", "sha256")]
