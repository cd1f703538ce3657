# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Secure Boot in the driver install: pure decisions (private, table-tested).

* signing_plan(): the node's Secure Boot state (``mokutil --sb-state``), the key given or not, its certificate
  enrolled or not (``mokutil --list-enrolled``), the install method and the BOM's mode -> refuse (SecureBootError,
  with what to do) or how to sign: the runfile's ``--module-signing-secret-key=`` / ``--module-signing-public-key=``
  (nvidia-installer option_table.h) and DKMS's ``mok_signing_key`` / ``mok_certificate`` (dell/dkms README).
* certificate_info(): the certificate's SHA1 fingerprint (what mokutil lists), issuer CN (what ``modinfo`` prints
  as ``signer``: kmod reads the PKCS#7 signer's issuer) and serial (``sig_key``), read from its DER without a library.
* signature_problems(): every NVIDIA module signed by that certificate, after activation.
* explain_load_failure(): ``Key was rejected by service`` (EKEYREJECTED) and friends, as a message that says what to do.

Nothing here ever formats the private key: messages name the option, never its value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _bom_stack
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.secureboot import fingerprint_matches

MODES = ("any", "enforced", "off")
# The modules a driver install builds and signs; nvidia_peermem only where the driver built it (OFED present).
SIGNED_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
OPTIONAL_MODULES = ("nvidia_peermem",)
ENROLL_HINT = (
    "enroll the certificate (DER) with 'mokutil --import <cert.der>', reboot and confirm 'Enroll MOK' in the MOK manager "
    "at the console, then rerun"
)
GIVE_KEY_HINT = (
    "give module_signing_key (the private key, from your vault: it is no_log and is removed from the node after the install) "
    "and module_signing_certificate (its certificate, enrolled as a MOK)"
)

_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----(?P<body>[A-Za-z0-9+/=\s]+)-----END CERTIFICATE-----")
_PEM_KEY = re.compile(r"-----BEGIN (?P<kind>(?:RSA |EC |ENCRYPTED )?PRIVATE KEY)-----[A-Za-z0-9+/=\s:,-]+-----END (?P=kind)-----")
_CN_OID = bytes.fromhex("0603550403")  # OBJECT IDENTIFIER 2.5.4.3 (commonName), tag and length included
_LOAD_REFUSED = re.compile(r"Key was rejected by service|Required key not available|Loading of module with unavailable key is rejected", re.IGNORECASE)
_LOCKDOWN = re.compile(r"Operation not permitted|unsigned module loading is restricted", re.IGNORECASE)


class SecureBootError(GpufleetError):
    """The node's Secure Boot state and the options given do not allow a driver install; the message says what to do."""


# -- the certificate ------------------------------------------------------------------------------------------------

def certificate_der(text):
    """The DER bytes of a certificate given as PEM (``-----BEGIN CERTIFICATE-----``) or as base64 of the DER."""
    if not isinstance(text, str) or not text.strip():
        raise SecureBootError("module_signing_certificate is empty: give the PEM certificate of the module signing key")
    match = _PEM_CERT.search(text)
    body = match.group("body") if match else text
    try:
        der = base64.b64decode("".join(body.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SecureBootError("module_signing_certificate is not a PEM certificate (-----BEGIN CERTIFICATE-----) nor base64 of its DER") from exc
    if not der or der[0] != 0x30:
        raise SecureBootError("module_signing_certificate does not hold an X.509 certificate (its DER does not start with a SEQUENCE)")
    return der


def _tlv(data, pos):
    """``(tag, content_start, content_end)`` of the DER element at ``pos``; ValueError when it runs past ``data``."""
    if pos + 2 > len(data):
        raise ValueError("truncated")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise ValueError("bad length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise ValueError("truncated")
    return tag, pos, pos + length


def _children(data, start, end):
    pos = start
    while pos < end:
        tag, content, stop = _tlv(data, pos)
        yield tag, content, stop
        pos = stop


def _common_name(data, start, end):
    """The last CN of a Name (RDNSequence), as text; None when it has none."""
    found = None
    for _set_tag, set_start, set_end in _children(data, start, end):
        for _seq_tag, seq_start, _seq_end in _children(data, set_start, set_end):
            if data[seq_start : seq_start + len(_CN_OID)] == _CN_OID:
                _tag, value_start, value_end = _tlv(data, seq_start + len(_CN_OID))
                found = data[value_start:value_end].decode("utf-8", errors="replace")
    return found


def certificate_info(der):
    """``{"sha1", "issuer_cn", "subject_cn", "serial"}`` of a DER certificate; SecureBootError when it does not read.

    ``sha1``: 40 lower-case hex digits, as mokutil's ``SHA1 Fingerprint`` without colons. ``serial``: upper-case
    hex pairs joined by colons, without leading zero bytes (as modinfo prints ``sig_key``).
    """
    try:
        _tag, cert_start, cert_end = _tlv(der, 0)
        _tag, tbs_start, tbs_end = _tlv(der, cert_start)
        fields = list(_children(der, tbs_start, tbs_end))
        if fields and fields[0][0] == 0xA0:  # [0] version
            fields = fields[1:]
        (serial_tag, serial_start, serial_end), _alg, (issuer_tag, issuer_start, issuer_end), _validity, (subject_tag, subject_start, subject_end) = fields[:5]
        if serial_tag != 0x02 or issuer_tag != 0x30 or subject_tag != 0x30 or cert_end > len(der):
            raise ValueError("not a certificate")
        serial = der[serial_start:serial_end].lstrip(b"\x00") or b"\x00"
        return {
            "sha1": hashlib.sha1(der).hexdigest(),  # noqa: S324 - the fingerprint mokutil lists, not a security decision
            "issuer_cn": _common_name(der, issuer_start, issuer_end),
            "subject_cn": _common_name(der, subject_start, subject_end),
            "serial": ":".join(f"{b:02X}" for b in serial),
        }
    except (ValueError, IndexError) as exc:
        raise SecureBootError("module_signing_certificate does not read as an X.509 certificate (DER): give the PEM certificate of the key") from exc


def check_private_key(text):
    """A PEM private key that sign-file can use without a passphrase; SecureBootError naming the option, never its value."""
    if not isinstance(text, str) or not text.strip():
        raise SecureBootError("module_signing_key is empty: " + GIVE_KEY_HINT)
    match = _PEM_KEY.search(text)
    if not match:
        raise SecureBootError("module_signing_key is not a PEM private key (-----BEGIN PRIVATE KEY----- ... -----END PRIVATE KEY-----); its value is not shown")
    if match.group("kind").startswith("ENCRYPTED") or "Proc-Type: 4,ENCRYPTED" in text:
        raise SecureBootError("module_signing_key is encrypted: the kernel's sign-file cannot prompt for its passphrase. Give it decrypted (from your vault)")


# -- the decision ---------------------------------------------------------------------------------------------------

def _state_words(sb):
    if sb is None:
        return "unknown (mokutil is not installed)"
    if sb["state"] == "enabled" and not sb["enforcing"]:
        return "enabled but not enforced (shim's validation is disabled)"
    return {"enabled": "enforced", "disabled": "disabled", "not_supported": "not supported (no EFI variables)"}.get(sb["state"], "unknown")


def signing_plan(sb, key_given, certificate=None, enrolled=None, method="runfile", dkms=True, mode="any", expected_sha1=None):
    """How the driver install signs its modules, or SecureBootError (refused before anything changes).

    ``sb``: parse_sb_state's result, None where mokutil is not installed. ``key_given``: module_signing_key and
    module_signing_certificate given. ``certificate``: certificate_info's result. ``enrolled``: parse_list_enrolled's
    result, None when it was not (or could not be) read. ``mode``: the BOM's ``secure_boot`` (any / enforced / off).
    ``expected_sha1``: the BOM's ``key_sha1``, the certificate the fleet signs with; another certificate is refused.

    Returns ``{"sign", "installer_args", "dkms_config", "enforcing", "state"}``: ``sign`` where a key is given (signing
    a module never hurts where nothing checks it); ``installer_args`` for the runfile; ``dkms_config`` where DKMS
    builds the modules (packages always, the runfile with ``dkms``).
    """
    if mode not in MODES:
        raise SecureBootError(f"secure_boot must be one of {', '.join(MODES)}, got {mode!r}")
    enforcing = None if sb is None or sb["state"] == "unknown" else bool(sb["enforcing"])
    state = _state_words(sb)
    if mode == "enforced" and enforcing is not True:
        how = "install mokutil so that the state can be read" if enforcing is None else "enable Secure Boot in the firmware setup (and enroll the key)"
        raise SecureBootError(
            f"the BOM says Secure Boot enforced but on this node it is {state}: {how}, or set secure_boot: any. Nothing was changed"
        )
    expected = (expected_sha1 or "").replace(":", "").lower()
    if expected and certificate and certificate["sha1"] != expected:
        raise SecureBootError(
            f"module_signing_certificate (SHA1 {certificate['sha1']}) is not the BOM's module-signing key (SHA1 {expected}): give the "
            "BOM's key pair, or correct the BOM's stack.secure_boot.key_sha1. Nothing was changed"
        )
    if mode == "off" and enforcing:
        raise SecureBootError(
            "the BOM says Secure Boot off but this node enforces it: disable it in the firmware setup, or set secure_boot: enforced "
            "(or any) and give the module signing key. Nothing was changed"
        )
    if enforcing and not key_given:
        raise SecureBootError(
            "Secure Boot is enforced on this node and no module signing key was given: the kernel would refuse the unsigned "
            f"nvidia.ko at its next load ('Key was rejected by service'). {GIVE_KEY_HINT[0].upper()}{GIVE_KEY_HINT[1:]}; "
            f"if the certificate is not enrolled yet, {ENROLL_HINT}. Nothing was changed"
        )
    if enforcing:
        if enrolled is None:
            raise SecureBootError(
                "Secure Boot is enforced but the enrolled keys could not be read (mokutil --list-enrolled): check mokutil on the node. Nothing was changed"
            )
        if not any(fingerprint_matches(entry.get("sha1"), certificate["sha1"]) for entry in enrolled):
            raise SecureBootError(
                f"the module signing certificate (SHA1 {certificate['sha1']}, CN {certificate.get('subject_cn') or '?'}) is not enrolled on this "
                f"node, which enforces Secure Boot: modules signed with it would be refused. To enroll it: {ENROLL_HINT}. Nothing was changed"
            )
    sign = bool(key_given)
    return {
        "sign": sign,
        "installer_args": sign and method == "runfile",
        "dkms_config": sign and (method == "package" or bool(dkms)),
        "enforcing": enforcing,
        "state": state,
    }


def installer_signing_args(key_path, certificate_path):
    """nvidia-installer's options for a user-supplied key pair (option_table.h: both must be given)."""
    return ["--module-signing-secret-key=" + key_path, "--module-signing-public-key=" + certificate_path]


def dkms_config_text(key_path, certificate_path):
    """A DKMS framework.conf drop-in: DKMS signs what it builds with this pair (and would create both files if one were missing)."""
    for path in (key_path, certificate_path):
        if '"' in path or "$" in path or "`" in path or "\n" in path:
            raise SecureBootError("the temporary key folder has a character DKMS's shell configuration cannot quote: set the remote tmp folder to a plain path")
    return (
        "# Written by gpufleet.lifecycle.nvidia_driver for one driver install, and removed after it.\n"
        f'mok_signing_key="{key_path}"\nmok_certificate="{certificate_path}"\n'
    )


def bom_mode(bom):
    """The BOM's ``stack.secure_boot`` mode (the bare mode or ``{mode, key_sha1}``): what nvidia_driver's ``secure_boot`` takes.

    ``any`` when the BOM names none. A YAML ``off`` read as false is ``off``. SecureBootError naming the BOM key otherwise.
    """
    stack = (bom or {}).get("stack") if isinstance(bom, dict) else None
    if isinstance(stack, dict) and stack.get("secure_boot") is False:
        stack = dict(stack, secure_boot="off")
    try:
        wanted = _bom_stack.normalize(stack)
    except _bom_stack.StackBomError as exc:
        raise SecureBootError(exc.msg) from exc
    return (wanted.get("secure_boot") or {}).get("mode") or "any"


def bom_key_sha1(bom):
    """The BOM's ``stack.secure_boot.key_sha1`` (40 lower-case hex digits), or "" when it names none."""
    stack = (bom or {}).get("stack") if isinstance(bom, dict) else None
    if isinstance(stack, dict) and stack.get("secure_boot") is False:
        return ""
    try:
        wanted = _bom_stack.normalize(stack)
    except _bom_stack.StackBomError as exc:
        raise SecureBootError(exc.msg) from exc
    return (wanted.get("secure_boot") or {}).get("key_sha1") or ""


# -- after activation -----------------------------------------------------------------------------------------------

def _hex(value):
    pairs = (value or "").replace(":", "").lower()
    while pairs.startswith("00") and len(pairs) > 2:
        pairs = pairs[2:]
    return pairs


def signature_problems(modinfos, certificate, modules=SIGNED_MODULES, optional=OPTIONAL_MODULES):
    """What is wrong with the installed NVIDIA modules' signatures, as sentences ([] when all are signed by ``certificate``).

    ``modinfos``: ``{module: parse_modinfo result, or None where modinfo finds no such module}``. The signer modinfo
    prints is the signing certificate's issuer CN; ``sig_key`` its serial. A module in ``optional`` may be absent.
    """
    problems = []
    wanted = certificate.get("issuer_cn") or certificate.get("subject_cn")
    for name in modules:
        info = modinfos.get(name)
        if info is None:
            if name not in optional:
                problems.append(f"{name}: modinfo finds no such module for the running kernel")
            continue
        if not info.get("signer"):
            problems.append(f"{name}: {info.get('filename') or name} is not signed: Secure Boot refuses it at its next load")
        elif info["signer"] != wanted:
            problems.append(f"{name}: signed by {info['signer']!r}, not by the module signing key {wanted!r}")
        elif info.get("sig_key") and certificate.get("serial") and _hex(info["sig_key"]) != _hex(certificate["serial"]):
            problems.append(
                f"{name}: signed by a key named {wanted!r} but with serial {info['sig_key']}, not {certificate['serial']}: another key of that name"
            )
    return problems


def explain_load_failure(text, enforcing):
    """A message for a module load that Secure Boot refused, or None when ``text`` is another failure."""
    if _LOAD_REFUSED.search(text or ""):
        return (
            "the kernel refused the new NVIDIA modules' signature ('Key was rejected by service'): they are unsigned or signed by a key "
            f"this node does not trust. Check that module_signing_certificate is enrolled (mokutil --list-enrolled) and matches "
            f"module_signing_key; {ENROLL_HINT}"
        )
    if enforcing and _LOCKDOWN.search(text or ""):
        return (
            "the kernel (locked down by Secure Boot) refused to load the new NVIDIA modules ('Operation not permitted'): they are not signed "
            f"by a trusted key. {GIVE_KEY_HINT[0].upper()}{GIVE_KEY_HINT[1:]}"
        )
    return None


__all__ = [
    "MODES",
    "SIGNED_MODULES",
    "SecureBootError",
    "bom_key_sha1",
    "bom_mode",
    "certificate_der",
    "certificate_info",
    "check_private_key",
    "dkms_config_text",
    "explain_load_failure",
    "installer_signing_args",
    "signature_problems",
    "signing_plan",
]
