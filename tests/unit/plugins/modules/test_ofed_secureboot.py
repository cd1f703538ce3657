"""The ofed module's DKMS rebuild of nvidia_peermem on a node that enforces Secure Boot (issue 24).

``dkms install -m nvidia --force`` reinstalls every module of the driver, nvidia.ko too, signed with DKMS's configured
pair or, without one, a pair DKMS generates that nobody enrolled: the kernel then refuses nvidia_peermem at once ('Key
was rejected by service') and nvidia at the next boot. So the rebuild is refused before anything changes without the
fleet's key, or with a key that is not enrolled or is not the BOM's; with it, the key is on the node only for the rebuild
(private folder, 0600, a DKMS drop-in naming it) and gone after, failure included; every module is checked signed by it
after the load; and the key never reaches a result or an invocation.
"""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import secureboot as sb
from ansible_collections.gpufleet.lifecycle.plugins.modules import ofed

# Fixtures come in by import (pytest finds them by name): pylint sees them unused.
# pylint: disable=unused-import
from test_ofed_module import DRIVER, KERNEL, NEW, args_for, node, state  # noqa: F401

pytest.importorskip("cryptography")
from test_nvidia_driver_secureboot import DER, OTHER_DER, PEM_CERT, PEM_KEY, enrolled_text, make_pair

CERT = sb.certificate_info(DER)
DROPIN = "etc/dkms/framework.conf.d/gpufleet-module-signing.conf"
MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
# What DKMS signs with when no pair is configured: one it generates, never enrolled (dell/dkms README).
DKMS_OWN = {"issuer_cn": "DKMS module signing key", "serial": "5D:4B"}
FLEET = {"issuer_cn": CERT["issuer_cn"], "serial": CERT["serial"]}


def secure(fake, enrolled=(DER,), sb_state="SecureBoot enabled\n"):
    """The fake node of test_ofed_module, enforcing Secure Boot: its modules signed by the fleet's key, DKMS signing what
    it builds with the pair its configuration names (the drop-in) or its own, the kernel refusing an unenrolled signer."""
    fake.signature = dict(FLEET)
    fake.built_signature = None
    fake.seen = {}
    fake.enrolled_serials = {sb.certificate_info(der)["serial"] for der in enrolled}

    def do_mokutil(args):
        if args == ["--sb-state"]:
            return (0 if "enabled" in sb_state else 1), sb_state, ""
        assert args == ["--list-enrolled"], args
        return 0, enrolled_text(*enrolled), ""

    def do_modinfo(args):
        name = args[0]
        if name not in MODULES:
            return 1, "", f"modinfo: ERROR: Module {name} not found.\n"
        sig = fake.signature
        return 0, (f"filename:       /lib/modules/{KERNEL}/updates/dkms/{name}.ko.zst\nversion:        {DRIVER}\nname:           {name}\n"
                   f"vermagic:       {KERNEL} SMP preempt mod_unload modversions\nsig_id:         PKCS#7\nsigner:         {sig['issuer_cn']}\n"
                   f"sig_key:        {sig['serial']}\nsig_hashalgo:   sha256\n"), ""

    plain_dkms, plain_modprobe = fake.do_dkms, fake.do_modprobe

    def do_dkms(args):
        if args[0] == "build":
            dropin = fake.root / DROPIN
            text = dropin.read_text() if dropin.exists() else None
            fake.seen["dropin"] = text
            if text:
                key = text.split('mok_signing_key="', 1)[1].split('"', 1)[0]
                cert = text.split('mok_certificate="', 1)[1].split('"', 1)[0]
                fake.seen.update(key=key, key_text=open(key).read(), key_mode=stat.S_IMODE(os.stat(key).st_mode),
                                 folder_mode=stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode))
                info = sb.certificate_info(open(cert, "rb").read())
                fake.built_signature = {"issuer_cn": info["issuer_cn"], "serial": info["serial"]}
            else:
                fake.built_signature = dict(DKMS_OWN)
        elif args[0] == "install":
            fake.signature = fake.built_signature
        return plain_dkms(args)

    def do_modprobe(args):
        if args == ["nvidia_peermem"] and fake.signature["serial"] not in fake.enrolled_serials:
            fake.dmesg += "[ 12.0] Loading of module with unavailable key is rejected\n"
            return 1, "", "modprobe: ERROR: could not insert 'nvidia_peermem': Key was rejected by service\n"
        return plain_modprobe(args)

    fake.do_mokutil, fake.do_modinfo, fake.do_dkms, fake.do_modprobe = do_mokutil, do_modinfo, do_dkms, do_modprobe
    return fake


def with_mokutil(monkeypatch):
    """The node has mokutil (test_ofed_module's node fixture knows only the OFED tools)."""
    from ansible.module_utils import basic

    real = basic.AnsibleModule.get_bin_path

    def get_bin_path(module, arg, required=False, opt_dirs=None):
        return "/usr/bin/mokutil" if arg == "mokutil" else real(module, arg, required, opt_dirs)

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)


def dkms_signs_with_its_own_key(fake):
    """DKMS's configuration wins over the drop-in (a framework.conf that names its own pair after ours)."""
    plain = fake.do_dkms

    def do_dkms(args):
        code = plain(args)
        if args[0] == "build":
            fake.built_signature = dict(DKMS_OWN)
        return code

    fake.do_dkms = do_dkms


@pytest.fixture
def sb_node(node, monkeypatch):  # noqa: F811
    with_mokutil(monkeypatch)
    return secure(node)


def signed(tmp_path, **extra):
    return args_for(tmp_path, module_signing_key=PEM_KEY, module_signing_certificate=PEM_CERT, **extra)


def no_secret(result):
    text = repr(result)
    assert "PRIVATE KEY" not in text and PEM_KEY.splitlines()[1] not in text


def test_the_fleet_key_signs_the_rebuild_and_is_gone_after_it(sb_node, run_module, tmp_path):
    result = run_module(ofed.main, signed(tmp_path, module_signing_certificate_sha1=CERT["sha1"]))
    assert result.get("failed") is not True, result.get("msg")
    assert result["plan"]["peermem"] == "rebuild" and "nvidia_peermem" in sb_node.modules
    # DKMS saw the drop-in naming the key, in a private folder, the key 0600.
    assert sb_node.seen["dropin"] and sb_node.seen["key_text"] == PEM_KEY
    assert (sb_node.seen["key_mode"], sb_node.seen["folder_mode"]) == (0o600, 0o700)
    assert not os.path.exists(sb_node.seen["key"]) and not os.path.exists(os.path.dirname(sb_node.seen["key"]))
    assert not (tmp_path / DROPIN).exists()
    assert sb_node.signature == FLEET
    signing = result["module_signing"]
    assert (signing["enforcing"], signing["signed"], signing["certificate_sha1"], signing["problems"]) == (True, True, CERT["sha1"], [])
    no_secret(result)


def test_without_a_key_the_rebuild_is_refused_before_anything_changes(sb_node, run_module, tmp_path):
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["failed"] is True
    assert "rebuilds nvidia_peermem with DKMS" in result["msg"] and "no module signing key was given" in result["msg"], result["msg"]
    assert "Nothing was changed" in result["msg"]
    assert sb_node.changing() == [] and state(tmp_path) is None
    # Broken once: without the check, DKMS signs with its own key and the kernel refuses nvidia_peermem after OFED changed.


def test_check_mode_refuses_too(sb_node, run_module, tmp_path):
    result = run_module(ofed.main, args_for(tmp_path), check_mode=True)
    assert result["failed"] is True and "no module signing key was given" in result["msg"]
    assert sb_node.changing() == []


def test_a_key_that_is_not_enrolled_is_refused_before_anything_changes(node, sb_node, run_module, tmp_path):  # noqa: F811
    secure(node, enrolled=(OTHER_DER,))
    result = run_module(ofed.main, signed(tmp_path))
    assert result["failed"] is True and "is not enrolled on this node" in result["msg"] and "mokutil --import" in result["msg"], result["msg"]
    assert node.changing() == [] and state(tmp_path) is None
    no_secret(result)


def test_another_key_than_the_boms_is_refused(sb_node, run_module, tmp_path):
    other_sha1 = sb.certificate_info(make_pair(cn="x", serial=9)[2])["sha1"]
    result = run_module(ofed.main, signed(tmp_path, module_signing_certificate_sha1=other_sha1))
    assert result["failed"] is True and "is not the BOM's module-signing key" in result["msg"]
    assert sb_node.changing() == []


def test_a_rebuild_dkms_signs_with_another_key_fails_naming_the_kernels_refusal(sb_node, run_module, tmp_path, monkeypatch):
    """DKMS's configuration wins over the drop-in (a framework.conf that names its own pair after ours): peermem is
    refused at load; the module says so, and the key is gone all the same."""
    dkms_signs_with_its_own_key(sb_node)
    result = run_module(ofed.main, signed(tmp_path))
    assert result["failed"] is True
    assert "nvidia_peermem does not load after its DKMS rebuild" in result["msg"] and "Key was rejected by service" in result["msg"], result["msg"]
    assert not (tmp_path / DROPIN).exists() and not os.path.exists(sb_node.seen["key"])
    assert state(tmp_path)["history"][-1]["result"] == "failed"
    no_secret(result)


def test_modules_loaded_but_signed_by_another_key_fail_the_check(node, run_module, tmp_path, monkeypatch):  # noqa: F811
    """Secure Boot off (nothing refuses a load), a key given: every module must still be the key's after the rebuild."""
    with_mokutil(monkeypatch)
    secure(node, sb_state="SecureBoot disabled\n")
    dkms_signs_with_its_own_key(node)
    node.enrolled_serials.add(DKMS_OWN["serial"])  # nothing refuses the load here
    result = run_module(ofed.main, signed(tmp_path))
    assert result["failed"] is True and "not all signed with module_signing_certificate" in result["msg"], result["msg"]
    assert "signed by 'DKMS module signing key'" in result["msg"]


def test_no_secure_boot_and_no_key_rebuilds_as_before(node, run_module, tmp_path):  # noqa: F811
    """A node without mokutil (most of the fleet): nothing asked, nothing signed, the rebuild as before."""
    result = run_module(ofed.main, args_for(tmp_path))
    assert result.get("failed") is not True, result.get("msg")
    assert result["module_signing"]["signed"] is False and result["module_signing"]["enforcing"] is None
    assert "nvidia_peermem" in node.modules


@pytest.mark.parametrize(("extra", "words"), [
    ({"module_signing_key": PEM_KEY}, "required together: module_signing_key, module_signing_certificate"),
    ({"module_signing_certificate_sha1": "abc\n"}, "module_signing_certificate_sha1 must be a SHA1 fingerprint"),
])
def test_bad_signing_options_fail_before_any_command(node, run_module, tmp_path, extra, words):  # noqa: F811
    result = run_module(ofed.main, args_for(tmp_path, **extra))
    assert result["failed"] is True and words in result["msg"], result["msg"]
    assert node.calls == []
    no_secret(result)


@pytest.mark.parametrize("journal", [False, True], ids=["syslog", "journal"])
@pytest.mark.parametrize("fails", [False, True], ids=["rebuilt", "rebuild-refused-at-load"])
def test_the_key_never_reaches_the_result_the_invocation_or_the_log(sb_node, tmp_path, monkeypatch, capsys, journal, fails):
    """The real AnsibleModule (its exit_json, fail_json and invocation log; only syslog / the journal caught)."""
    import json
    import syslog
    import types

    from ansible.module_utils import basic
    from test_nvidia_driver import _real_module_args

    if fails:
        dkms_signs_with_its_own_key(sb_node)
    logged = []
    monkeypatch.setattr(syslog, "openlog", lambda *a, **k: None)
    monkeypatch.setattr(syslog, "syslog", lambda *a: logged.append(str(a[-1])))
    monkeypatch.setattr(basic, "has_journal", journal)
    if journal:
        monkeypatch.setattr(basic, "journal", types.SimpleNamespace(send=lambda **kw: logged.append(json.dumps(kw))), raising=False)
    with _real_module_args(signed(tmp_path)):
        with pytest.raises(SystemExit):
            ofed.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    assert bool(result.get("failed")) is fails, result.get("msg")
    assert result["invocation"]["module_args"]["module_signing_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert logged, "the invocation was not logged at all: the test would see nothing"
    for text in (out, *logged):
        for line in PEM_KEY.splitlines()[1:-1]:
            assert line not in text
    assert sb_node.seen["key"] and not os.path.exists(sb_node.seen["key"])


def test_an_unchanged_node_reads_no_secure_boot(sb_node, run_module, tmp_path):
    sb_node.ofed, sb_node.loaded_ofed, sb_node.peermem_built_for = ("doca-ofed", NEW), NEW, NEW
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["changed"] is False and "module_signing" not in result
    assert not any(call[0] == "mokutil" for call in sb_node.calls)
