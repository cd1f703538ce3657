"""nvidia_driver on a node that enforces Secure Boot: refused before anything changes without a key or with a key that is
not enrolled; with an enrolled key the runfile gets NVIDIA's signing options and DKMS a drop-in naming the key, which is on
the node (0600, private folder) only for the install and gone after it, failure included; every module verified signed;
'Key was rejected by service' at load fails the module. The key never reaches a result, an invocation or a log (issue 24)."""

from __future__ import annotations

import datetime
import json
import os
import stat

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import package as _driver_package
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import secureboot as sb
from ansible_collections.gpufleet.lifecycle.plugins.modules import nvidia_driver

# Fixtures come in by import (pytest finds them by name): pylint sees them unused.
# pylint: disable=unused-import
from test_nvidia_driver import APT_OPTS, DPKG_QUERY, FIXTURES, MODINFO, NEW, READ, Node, apt_tools, real_module, runfile_args  # noqa: F401

cryptography = pytest.importorskip("cryptography")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def make_pair(cn="gpufleet module signing key", serial=0x1F2E3D4C5B6A):
    """A real self-signed certificate and its key: (pem_key, pem_cert, der)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpufleet"), x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650)).sign(key, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return pem_key, cert.public_bytes(serialization.Encoding.PEM).decode(), cert.public_bytes(serialization.Encoding.DER)


PEM_KEY, PEM_CERT, DER = make_pair()
CERT = sb.certificate_info(DER)
_OTHER_KEY, OTHER_CERT, OTHER_DER = make_pair(cn="someone else's key", serial=7)
SB_STATE = ["/usr/bin/mokutil", "--sb-state"]
LIST_ENROLLED = ["/usr/bin/mokutil", "--list-enrolled"]
MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
DROPIN = "etc/dkms/framework.conf.d/gpufleet-module-signing.conf"
SIGNING_FLAGS = ("--module-signing-secret-key=", "--module-signing-public-key=")


def enrolled_text(*ders):
    """mokutil --list-enrolled, verbose (the default from 0.7.2 on), for these certificates."""
    blocks = [] if ders else ["MokListRT is empty\n"]
    for index, der in enumerate(ders, 1):
        info = sb.certificate_info(der)
        pairs = ":".join(info["sha1"][i : i + 2] for i in range(0, 40, 2))
        blocks.append(f"[key {index}]\nSHA1 Fingerprint: {pairs}\nCertificate:\n    Data:\n        Version: 3 (0x2)\n"
                      f"        Subject: O=gpufleet, CN={info['subject_cn']}\n")
    return "".join(blocks)


def modinfo_text(name, version, signer=None, serial=None):
    lines = [f"filename:       /lib/modules/6.8.0-45-generic/updates/dkms/{name.replace('_', '-')}.ko", f"version:        {version}",
             "license:        Dual MIT/GPL", f"name:           {name}", "vermagic:       6.8.0-45-generic SMP preempt mod_unload modversions"]
    if signer:
        lines += ["sig_id:         PKCS#7", f"signer:         {signer}", f"sig_key:        {serial}", "sig_hashalgo:   sha256"]
    return "\n".join(lines) + "\n"


class SecureNode:
    """test_nvidia_driver's fake node, enforcing Secure Boot with these certificates enrolled."""

    def __init__(self, tmp_path, commands, monkeypatch, enrolled=(DER,), state="SecureBoot enabled\n"):
        self.node = Node(tmp_path, commands, monkeypatch, nvswitch=False)
        self.commands = commands
        self.root = self.node.root
        commands.tool("mokutil")
        commands.on(SB_STATE, stdout=state, rc=0 if "enabled" in state else 1)
        commands.on(LIST_ENROLLED, stdout=enrolled_text(*enrolled))
        self.seen = {}  # what was on the node while the installer ran

    def signed_modules(self, signer=CERT["issuer_cn"], serial=CERT["serial"], version=NEW):
        for name in MODULES:
            self.commands.on(["/usr/bin/modinfo", name], stdout=modinfo_text(name, version, signer, serial))

    def look(self, argv):
        """At install time: the key and certificate the installer is given, and the DKMS drop-in."""
        flags = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith(SIGNING_FLAGS)}
        dropin = self.root / DROPIN
        self.seen.update(flags=flags, dropin=dropin.read_text() if dropin.exists() else None)
        key = flags.get("--module-signing-secret-key")
        if key is None and self.seen["dropin"]:
            key = self.seen["dropin"].split('mok_signing_key="', 1)[1].split('"', 1)[0]
        if key:
            st = os.stat(key)
            self.seen.update(key=key, key_text=open(key).read(), key_mode=stat.S_IMODE(st.st_mode),
                             folder_mode=stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode),
                             cert=open(os.path.join(os.path.dirname(key), "module-signing.der"), "rb").read())

    def assert_key_gone(self):
        assert self.seen.get("key"), "the test never saw the key on the node"
        assert not os.path.exists(self.seen["key"])
        assert not os.path.exists(os.path.dirname(self.seen["key"]))
        assert not (self.root / DROPIN).exists()


@pytest.fixture
def secure(tmp_path, commands, monkeypatch):
    def make(**kwargs):
        return SecureNode(tmp_path, commands, monkeypatch, **kwargs)

    return make


def signing_args(n, tmp_path, **extra):
    return runfile_args(n.node, tmp_path, module_signing_key=PEM_KEY, module_signing_certificate=PEM_CERT, fabricmanager="skip", **extra)


def installer_run(n, tmp_path, args, rc=0, stdout="", signer=CERT["issuer_cn"]):
    """Answer the installer, whatever the temporary key paths are; the hook records what the node held then."""
    real = n.commands.run_command

    def run_command(module, argv, **kwargs):
        rest = [n.node._original(a) for a in n.commands.split_timeout(list(argv))[1]]  # the private copy's path -> source
        if len(rest) > 1 and rest[0] == "/usr/bin/sh" and rest[1] == args["source"]:
            n.commands.calls.append({"argv": list(rest), "cmd": list(argv), "timeout": 1, "environ_update": None, "kwargs": kwargs})
            n.look(rest)
            if rc == 0:
                n.node.set_driver(NEW)
                n.signed_modules(signer=signer)
            return rc, stdout, ""
        return real(module, argv, **kwargs)

    return run_command


def test_enrolled_key_signs_the_runfile_install_and_leaves_nothing(secure, tmp_path, commands, run_module, monkeypatch):
    n = secure()
    args = signing_args(n, tmp_path)
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args))

    result = run_module(nvidia_driver.main, args)

    assert not result.get("failed"), result.get("msg")
    installer = next(c["argv"] for c in commands.calls if c["argv"][:2] == ["/usr/bin/sh", args["source"]])
    assert installer[2:6] == ["--silent", "--no-questions", "-m=kernel-open", "--dkms"]
    assert [a.split("=", 1)[0] for a in installer[6:]] == ["--module-signing-secret-key", "--module-signing-public-key"]
    assert n.seen["key_text"] == PEM_KEY and n.seen["key_mode"] == 0o600 and n.seen["folder_mode"] == 0o700
    assert n.seen["cert"] == DER  # DER: what sign-file and mokutil --import take
    assert n.seen["dropin"] == sb.dkms_config_text(n.seen["key"], os.path.join(os.path.dirname(n.seen["key"]), "module-signing.der"))
    n.assert_key_gone()
    assert result["module_signing"] == {"secure_boot": "enforced", "enforcing": True, "signed": True, "certificate_sha1": CERT["sha1"],
                                        "signer": CERT["issuer_cn"], "problems": []}
    argvs = [c["argv"] for c in commands.calls]
    assert argvs.index(LIST_ENROLLED) < argvs.index(["/usr/bin/systemctl", "stop", "nvidia-dcgm"]), "enrollment is checked before anything changes"
    for name in MODULES:
        assert ["/usr/bin/modinfo", name] in argvs[argvs.index(installer):], f"{name}'s signature was not checked after the load"


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize(("given", "enrolled", "words"), [
    (False, (DER,), "no module signing key was given"),
    (True, (OTHER_DER,), f"(SHA1 {CERT['sha1']}, CN gpufleet module signing key) is not enrolled"),
    (True, (), "mokutil --import <cert.der>"),
], ids=["no-key", "not-enrolled", "moklist-empty"])
def test_refused_before_anything_changes(secure, tmp_path, commands, run_module, given, enrolled, words, check_mode):
    n = secure(enrolled=enrolled)
    args = signing_args(n, tmp_path) if given else runfile_args(n.node, tmp_path, fabricmanager="skip")
    result = run_module(nvidia_driver.main, args, check_mode=check_mode)
    assert result["failed"] is True
    assert words in result["msg"] and result["msg"].endswith("Nothing was changed")
    assert "MOK manager" in result["msg"]
    reads = [*READ[:1], MODINFO, READ[3], SB_STATE] + ([LIST_ENROLLED] if given else [])
    assert [c["argv"] for c in commands.calls] == reads
    assert not n.node.state_file.exists()


def test_secure_boot_off_installs_as_before(secure, tmp_path, commands, run_module, monkeypatch):
    n = secure(state="SecureBoot disabled\n")
    args = runfile_args(n.node, tmp_path, fabricmanager="skip")
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args))
    result = run_module(nvidia_driver.main, args)
    assert not result.get("failed"), result.get("msg")
    assert n.seen["flags"] == {} and n.seen["dropin"] is None
    assert LIST_ENROLLED not in [c["argv"] for c in commands.calls]
    assert result["module_signing"]["signed"] is False and result["module_signing"]["secure_boot"] == "disabled"


def test_bom_enforced_on_a_node_that_is_off_is_refused(secure, tmp_path, commands, run_module):
    n = secure(state="SecureBoot disabled\n")
    result = run_module(nvidia_driver.main, signing_args(n, tmp_path, secure_boot="enforced"), check_mode=True)
    assert result["failed"] and "the BOM says Secure Boot enforced but on this node it is disabled" in result["msg"]


def test_installer_failure_removes_the_key(secure, tmp_path, commands, run_module, monkeypatch):
    n = secure()
    args = signing_args(n, tmp_path)
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args, rc=1, stdout="ERROR: Installation has failed."))
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert n.seen["key_text"] == PEM_KEY
    n.assert_key_gone()
    assert PEM_KEY.splitlines()[1] not in json.dumps(result)


def test_key_rejected_at_load_fails_for_the_rollback(secure, tmp_path, commands, run_module, monkeypatch):
    n = secure()
    args = signing_args(n, tmp_path)
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args))
    commands.on(["/usr/bin/modprobe", "nvidia"], rc=1, stderr="modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n")
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert result["msg"].startswith("the kernel refused the new NVIDIA modules' signature ('Key was rejected by service')")
    assert result.get("reboot_required") is None  # not a reboot's matter: the module fails and the role rolls back
    assert "node_state" in result
    n.assert_key_gone()
    doc = json.loads(n.node.state_file.read_text())
    assert [h["result"] for h in doc["history"]] == ["started", "failed"]


def test_modules_signed_by_another_key_fail_the_install(secure, tmp_path, commands, run_module, monkeypatch):
    n = secure()
    args = signing_args(n, tmp_path)
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args, signer="DKMS module signing key"))
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert "not all signed by the module signing key" in result["msg"] and "signed by 'DKMS module signing key'" in result["msg"]
    assert len(result["module_signing"]["problems"]) == len(MODULES)


def test_unchanged_driver_reports_its_signatures_read_only(secure, tmp_path, commands, run_module):
    """The role's verify after a reboot: nothing to change, the loaded modules' signatures as module_signing.problems."""
    n = secure()
    n.node.set_driver(NEW)
    n.signed_modules(signer="DKMS module signing key", serial="01")
    result = run_module(nvidia_driver.main, signing_args(n, tmp_path), check_mode=True)
    assert result["changed"] is False
    assert [p.split(":", 1)[0] for p in result["module_signing"]["problems"]] == list(MODULES)
    n.signed_modules()
    result = run_module(nvidia_driver.main, signing_args(n, tmp_path), check_mode=True)
    assert result["module_signing"]["problems"] == []


def test_apt_packages_signed_through_the_dkms_dropin(secure, tmp_path, commands, run_module, monkeypatch):
    monkeypatch.setattr(_driver_package, "get_distribution", lambda: "Ubuntu")
    n = secure()
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout=(FIXTURES / "driver/dpkg_query_535_held.txt").read_text())
    install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS, "nvidia-driver-550-open=550.90.07-1"]
    commands.on(install)
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-driver-550-open"])

    def installed():
        n.look(install)
        n.node.set_driver(NEW)
        n.signed_modules()
        commands.on(DPKG_QUERY, stdout=f"nvidia-driver-550-open {NEW}-1 hi \n")

    n.node.hooks[tuple(install)] = installed
    args = {"version": NEW, "method": "package", "state_file": str(n.node.state_file), "fabricmanager": "skip",
            "module_signing_key": PEM_KEY, "module_signing_certificate": PEM_CERT}
    result = run_module(nvidia_driver.main, args)
    assert not result.get("failed"), result.get("msg")
    assert n.seen["flags"] == {}
    assert n.seen["key_text"] == PEM_KEY and 'mok_certificate="' in n.seen["dropin"]
    n.assert_key_gone()


def test_certificate_not_the_boms_is_refused_before_anything(secure, tmp_path, commands, run_module):
    n = secure()
    result = run_module(nvidia_driver.main, signing_args(n, tmp_path, module_signing_certificate_sha1="ab" * 20))
    assert result["failed"] and f"(SHA1 {CERT['sha1']}) is not the BOM's module-signing key (SHA1 {'ab' * 20})" in result["msg"]
    assert not n.node.state_file.exists()
    result = run_module(nvidia_driver.main, signing_args(n, tmp_path, module_signing_certificate_sha1="ab"), check_mode=True)
    assert result["failed"] and "module_signing_certificate_sha1 must be a SHA1 fingerprint" in result["msg"] and "got 2 characters" in result["msg"]


def test_key_without_certificate_is_refused_naming_both(secure, tmp_path, commands, run_module):
    n = secure()
    args = signing_args(n, tmp_path)
    del args["module_signing_certificate"]
    result = run_module(nvidia_driver.main, args, check_mode=True)
    assert result["failed"] and "module_signing_key and module_signing_certificate go together" in result["msg"]
    assert commands.calls == []


# -- the key never reaches output or logs (invariant 7): the real AnsibleModule -------------------------------------

@pytest.mark.parametrize("journal", [False, True], ids=["syslog", "journal"])
@pytest.mark.parametrize("installer_rc", [0, 1], ids=["upgraded", "installer-failed"])
def test_key_never_in_result_invocation_or_log(secure, tmp_path, commands, monkeypatch, real_module, journal, installer_rc):  # noqa: F811
    n = secure()
    args = signing_args(n, tmp_path)
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args, rc=installer_rc))
    result, out, logged = real_module(args, journal=journal)
    assert bool(result.get("failed")) is bool(installer_rc), result.get("msg")
    assert result["invocation"]["module_args"]["module_signing_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert logged, "the invocation was not logged at all: the test would see nothing"
    body = "".join(PEM_KEY.splitlines()[1:-1])
    for text in (out, *logged, json.dumps(result)):
        for line in PEM_KEY.splitlines()[1:-1]:
            assert line not in text
        assert body[:40] not in text
    n.assert_key_gone()
