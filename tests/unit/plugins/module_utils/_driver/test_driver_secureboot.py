"""_driver/secureboot: Secure Boot state x key given x enrolled x install method -> refuse / how to sign; the
certificate read from its DER; every NVIDIA module signed by it; the kernel's refusal at load as a message."""

from __future__ import annotations

import base64
import datetime
import hashlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import secureboot as sb
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import kmod as kmod_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import secureboot as sb_parser

cryptography = pytest.importorskip("cryptography")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def make_pair(cn="gpufleet module signing key", serial=0x1F2E3D4C5B6A):
    """A real self-signed certificate and key, as openssl req -x509 makes them: (pem_key, pem_cert, der)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpufleet"), x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650)).sign(key, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return pem_key, cert.public_bytes(serialization.Encoding.PEM).decode(), cert.public_bytes(serialization.Encoding.DER)


PEM_KEY, PEM_CERT, DER = make_pair()
CERT = sb.certificate_info(DER)
ENABLED = sb_parser.parse_sb_state("SecureBoot enabled\n")
SHIM_OFF = sb_parser.parse_sb_state("SecureBoot enabled\nSecureBoot validation is disabled in shim\n")
DISABLED = sb_parser.parse_sb_state("SecureBoot disabled\n")
SETUP = sb_parser.parse_sb_state("SecureBoot disabled\nPlatform is in Setup Mode\n")
BIOS = sb_parser.parse_sb_state("EFI variables are not supported on this system\n")
UNKNOWN = sb_parser.parse_sb_state("Cannot determine secure boot state.\n")
CANONICAL = {"sha1": "76a092065800bf376901c372cd55a90e1fded2e0", "cn": "Canonical Ltd. Master Certificate Authority"}
CANONICAL_COLONS = "76:a0:92:06:58:00:bf:37:69:01:c3:72:cd:55:a9:0e:1f:de:d2:e0"
OURS = {"sha1": CERT["sha1"], "cn": CERT["subject_cn"]}
OURS_SHORT = {"sha1": CERT["sha1"][:10], "cn": CERT["subject_cn"]}  # mokutil 0.7.1 / --short


def test_certificate_read_from_pem_and_base64_der():
    assert CERT == {"sha1": hashlib.sha1(DER).hexdigest(), "issuer_cn": "gpufleet module signing key",  # noqa: S324
                    "subject_cn": "gpufleet module signing key", "serial": "1F:2E:3D:4C:5B:6A"}
    assert sb.certificate_der(PEM_CERT) == DER
    assert sb.certificate_der(base64.b64encode(DER).decode()) == DER
    assert sb.certificate_info(sb.certificate_der("junk before\n" + PEM_CERT + "\njunk after"))["sha1"] == CERT["sha1"]


def test_serial_with_high_bit_loses_its_sign_byte_as_modinfo_prints_it():
    _key, _pem, der = make_pair(serial=0x80AB)
    assert sb.certificate_info(der)["serial"] == "80:AB"


BAD_CERTIFICATES = ["", "   ", "not base64 !", base64.b64encode(b"\x02\x01\x00").decode(), "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----"]


@pytest.mark.parametrize("text", BAD_CERTIFICATES)
def test_bad_certificate_is_refused_naming_the_option(text):
    with pytest.raises(sb.SecureBootError, match="module_signing_certificate"):
        sb.certificate_info(sb.certificate_der(text))


def test_private_key_checks_never_show_the_value():
    sb.check_private_key(PEM_KEY)
    sb.check_private_key(PEM_KEY.replace("PRIVATE KEY", "RSA PRIVATE KEY"))
    for bad in ("hunter2-not-a-key", PEM_KEY.replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"), ""):
        with pytest.raises(sb.SecureBootError, match="module_signing_key") as caught:
            sb.check_private_key(bad)
        assert "hunter2" not in caught.value.msg and "MII" not in caught.value.msg


# sb state, key given, enrolled list, method, dkms, BOM mode -> (sign, installer_args, dkms_config) or the refusal's words
PLANS = [
    # Secure Boot off (or not there): installs as before; a key given is used anyway
    ("off-nokey-runfile", DISABLED, False, None, "runfile", True, "any", (False, False, False)),
    ("off-key-runfile-dkms", DISABLED, True, None, "runfile", True, "any", (True, True, True)),
    ("off-key-runfile-nodkms", DISABLED, True, None, "runfile", False, "any", (True, True, False)),
    ("off-key-package", DISABLED, True, None, "package", True, "any", (True, False, True)),
    ("setup-mode-nokey", SETUP, False, None, "package", True, "any", (False, False, False)),
    ("bios-nokey", BIOS, False, None, "runfile", True, "off", (False, False, False)),
    ("shim-validation-off-nokey", SHIM_OFF, False, None, "runfile", True, "any", (False, False, False)),
    ("no-mokutil-nokey", None, False, None, "runfile", True, "any", (False, False, False)),
    ("unknown-key", UNKNOWN, True, None, "package", True, "any", (True, False, True)),
    # enforced: the key must be given and enrolled
    ("enforced-nokey", ENABLED, False, None, "runfile", True, "any", "no module signing key was given"),
    ("enforced-nokey-package", ENABLED, False, [CANONICAL], "package", True, "any", "mokutil --import"),
    ("enforced-key-unread", ENABLED, True, None, "runfile", True, "any", "could not be read"),
    ("enforced-key-not-enrolled", ENABLED, True, [CANONICAL], "runfile", True, "any", "is not enrolled on this node"),
    ("enforced-key-empty-moklist", ENABLED, True, [], "package", True, "any", "Enroll MOK"),
    ("enforced-key-enrolled-runfile", ENABLED, True, [CANONICAL, OURS], "runfile", True, "any", (True, True, True)),
    ("enforced-key-enrolled-runfile-nodkms", ENABLED, True, [OURS], "runfile", False, "enforced", (True, True, False)),
    ("enforced-key-enrolled-short-package", ENABLED, True, [OURS_SHORT], "package", True, "enforced", (True, False, True)),
    # the BOM's mode against the node
    ("bom-enforced-node-off", DISABLED, True, None, "runfile", True, "enforced", "the BOM says Secure Boot enforced but on this node it is disabled"),
    ("bom-enforced-shim-off", SHIM_OFF, True, [OURS], "runfile", True, "enforced", "not enforced"),
    ("bom-enforced-no-mokutil", None, True, None, "runfile", True, "enforced", "install mokutil"),
    ("bom-off-node-enforced", ENABLED, True, [OURS], "runfile", True, "off", "the BOM says Secure Boot off but this node enforces it"),
]


@pytest.mark.parametrize(("state", "key", "enrolled", "method", "dkms", "mode", "expected"),
                         [p[1:] for p in PLANS], ids=[p[0] for p in PLANS])
def test_signing_plan(state, key, enrolled, method, dkms, mode, expected):
    certificate = CERT if key else None
    if isinstance(expected, str):
        with pytest.raises(sb.SecureBootError) as caught:
            sb.signing_plan(state, key, certificate, enrolled, method, dkms, mode)
        assert expected in caught.value.msg
        assert caught.value.msg.endswith("Nothing was changed")
        return
    plan = sb.signing_plan(state, key, certificate, enrolled, method, dkms, mode)
    assert (plan["sign"], plan["installer_args"], plan["dkms_config"]) == expected


def test_refusal_without_key_says_both_ways_out():
    with pytest.raises(sb.SecureBootError) as caught:
        sb.signing_plan(ENABLED, False)
    assert "module_signing_key" in caught.value.msg and "module_signing_certificate" in caught.value.msg
    assert "mokutil --import" in caught.value.msg and "MOK manager" in caught.value.msg and "Key was rejected by service" in caught.value.msg


@pytest.mark.parametrize(("expected", "state", "refused"), [
    (CERT["sha1"], ENABLED, False),
    (":".join(CERT["sha1"][i : i + 2] for i in range(0, 40, 2)).upper(), ENABLED, False),  # as mokutil prints it
    ("0" * 40, ENABLED, True),
    ("0" * 40, DISABLED, True),  # the BOM's key is the fleet's key, Secure Boot or not
    ("", ENABLED, False),
], ids=["sha1", "sha1-as-mokutil-prints-it", "another-enabled", "another-disabled", "none"])  # CERT is made per run: fixed ids for xdist
def test_certificate_must_be_the_boms(expected, state, refused):
    if refused:
        with pytest.raises(sb.SecureBootError, match="is not the BOM's module-signing key"):
            sb.signing_plan(state, True, CERT, [OURS], expected_sha1=expected)
    else:
        assert sb.signing_plan(state, True, CERT, [OURS], expected_sha1=expected)["sign"] is True


def test_bad_mode_is_named():
    with pytest.raises(sb.SecureBootError, match="secure_boot must be one of any, enforced, off"):
        sb.signing_plan(DISABLED, False, mode="on")


def test_installer_and_dkms_options_are_the_real_ones():
    assert sb.installer_signing_args("/tmp/k/module.key", "/tmp/k/module.der") == [
        "--module-signing-secret-key=/tmp/k/module.key", "--module-signing-public-key=/tmp/k/module.der"]
    text = sb.dkms_config_text("/tmp/k/module.key", "/tmp/k/module.der")
    assert 'mok_signing_key="/tmp/k/module.key"\n' in text and 'mok_certificate="/tmp/k/module.der"\n' in text
    with pytest.raises(sb.SecureBootError):
        sb.dkms_config_text('/tmp/"$(reboot)"/k', "/tmp/c")


def modinfo(name, signer=None, sig_key=None):
    lines = [f"filename:       /lib/modules/6.8.0-45-generic/updates/dkms/{name.replace('_', '-')}.ko", "version:        580.95.05", f"name:           {name}"]
    if signer is not None:
        lines += ["sig_id:         PKCS#7", f"signer:         {signer}"] + ([f"sig_key:        {sig_key}"] if sig_key else []) + ["sig_hashalgo:   sha256"]
    return kmod_parser.parse_modinfo("\n".join(lines) + "\n")


ALL_OURS = {m: modinfo(m, CERT["issuer_cn"], "00:1F:2E:3D:4C:5B:6A") for m in sb.SIGNED_MODULES}
SIGNATURES = [
    ("all-ours", ALL_OURS, []),
    ("peermem-absent-is-fine", {**ALL_OURS, "nvidia_peermem": None}, []),
    ("uvm-missing", {**ALL_OURS, "nvidia_uvm": None}, ["nvidia_uvm: modinfo finds no such module"]),
    ("drm-unsigned", {**ALL_OURS, "nvidia_drm": modinfo("nvidia_drm")}, ["nvidia_drm: /lib/modules/6.8.0-45-generic/updates/dkms/nvidia-drm.ko is not signed"]),
    ("dkms-own-key", {**ALL_OURS, "nvidia": modinfo("nvidia", "DKMS module signing key")}, ["nvidia: signed by 'DKMS module signing key', not by"]),
    ("same-name-other-serial", {**ALL_OURS, "nvidia_modeset": modinfo("nvidia_modeset", CERT["issuer_cn"], "AA:BB")},
     ["nvidia_modeset: signed by a key named"]),
    ("no-sig-key-printed", {m: modinfo(m, CERT["issuer_cn"]) for m in sb.SIGNED_MODULES}, []),
]


@pytest.mark.parametrize(("modinfos", "expected"), [s[1:] for s in SIGNATURES], ids=[s[0] for s in SIGNATURES])
def test_signature_problems(modinfos, expected):
    problems = sb.signature_problems(modinfos, CERT)
    assert len(problems) == len(expected)
    for problem, start in zip(problems, expected):
        assert problem.startswith(start), problem


@pytest.mark.parametrize(("text", "enforcing", "words"), [
    ("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n", True, "Key was rejected by service"),
    ("insmod: ERROR: could not insert module src/facer.ko: Key was rejected by service", None, "enrolled"),
    ("[ 1748.999277] Loading of module with unavailable key is rejected", True, "mokutil --import"),
    ("modprobe: ERROR: could not insert 'nvidia': Operation not permitted\n", True, "Operation not permitted"),
    ("modprobe: ERROR: could not insert 'nvidia': Operation not permitted\n", False, None),
    ("modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-45-generic\n", True, None),
])
def test_load_failures_secure_boot_refused(text, enforcing, words):
    message = sb.explain_load_failure(text, enforcing)
    if words is None:
        assert message is None
    else:
        assert words in message


def test_installer_refused_at_its_test_load_says_what_to_do():
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.runfile import explain_failure

    # nvidia-installer-ERROR_not-signed-by-trusted-key (gpu-operator266): its build lines come first, the signature is the cause.
    output = ("Building kernel modules\n  : [##############################] 100%\n\nERROR: The kernel module failed to load, because it was "
              "not signed by a key that is trusted by the kernel. Please try installing the driver again, and sign the kernel module when "
              "prompted to do so.\n")
    message = explain_failure(output, "6.8.0-45-generic")
    assert message.startswith("the NVIDIA installer built the modules but the kernel refused them") and "mokutil --import" in message


@pytest.mark.parametrize(("bom", "mode"), [
    ({}, "any"),
    (None, "any"),
    ({"driver": {"version": "570.124.06"}}, "any"),
    ({"stack": {"secure_boot": "enforced"}}, "enforced"),
    ({"stack": {"secure_boot": {"mode": "enforced", "key_sha1": "76:a0:92:06:58:00:bf:37:69:01:c3:72:cd:55:a9:0e:1f:de:d2:e0"}}}, "enforced"),
    ({"stack": {"secure_boot": False}}, "off"),  # YAML's bare off
    ({"stack": {"secure_boot": {"mode": "any"}}}, "any"),
])
def test_bom_mode(bom, mode):
    assert sb.bom_mode(bom) == mode


def test_bom_key_sha1():
    assert sb.bom_key_sha1({"stack": {"secure_boot": {"mode": "enforced", "key_sha1": CANONICAL_COLONS}}}) == CANONICAL["sha1"]
    assert sb.bom_key_sha1({"stack": {"secure_boot": "enforced"}}) == ""
    assert sb.bom_key_sha1({}) == ""
    with pytest.raises(sb.SecureBootError, match="key_sha1"):
        sb.bom_key_sha1({"stack": {"secure_boot": {"mode": "enforced", "key_sha1": "-----BEGIN PRIVATE KEY-----"}}})


def test_bom_mode_names_the_bad_key():
    with pytest.raises(sb.SecureBootError, match=r"stack\.secure_boot\.mode must be one of enforced, off, any"):
        sb.bom_mode({"stack": {"secure_boot": "on"}})


def test_filter_exposes_it():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.lifecycle.plugins.filter import nvidia_driver_secureboot as filters

    assert filters.FilterModule().filters()["driver_secure_boot_mode"]({"stack": {"secure_boot": "enforced"}}) == "enforced"
    bom = {"stack": {"secure_boot": {"mode": "enforced", "key_sha1": CANONICAL_COLONS}}}
    assert filters.FilterModule().filters()["driver_secure_boot_key_sha1"](bom) == CANONICAL["sha1"]
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.driver_secure_boot_mode: BOM stack\.secure_boot"):
        filters.driver_secure_boot_mode({"stack": {"secure_boot": {"mode": "enforced", "key": "x"}}})
