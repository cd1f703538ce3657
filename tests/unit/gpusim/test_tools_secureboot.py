"""The simulated node under UEFI Secure Boot (issue 24): the spec key, mokutil from it, the runfile installer and DKMS
signing the driver's modules with the pair they are given, modinfo printing the signer, and the kernel refusing a module
no enrolled key signed, with the real messages ("Key was rejected by service", "Loading of module with unavailable key
is rejected"; unsigned: "Operation not permitted")."""

from __future__ import annotations

import datetime
import hashlib

import pytest
from gpusim import artifacts, spec
from gpusim import secureboot as gsb
from gpusim import state as st
from test_tools_support import node_factory

cryptography = pytest.importorskip("cryptography")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

make_node = pytest.fixture(node_factory)
NEW = "570.124.06"


def key_pair(folder, cn="fleet MOK", serial=0x0ABC):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    key_path, cert_path = folder / "module.key", folder / "module.der"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    der = cert.public_bytes(serialization.Encoding.DER)
    cert_path.write_bytes(der)
    return str(key_path), str(cert_path), hashlib.sha1(der).hexdigest()  # noqa: S324


def secure_node(make_node, *sha1s):
    return make_node(secure_boot=gsb.spec_value({"enabled": True, "enrolled": list(sha1s)}, "test"))


def unload(node):
    node.run("systemctl", "stop", "nvidia-persistenced")
    for mod in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"):
        assert node.run("rmmod", mod).returncode == 0, mod


def test_spec_key_is_checked_and_reaches_mokutil(make_node, tmp_path):
    _k, _c, sha1 = key_pair(tmp_path / "k")
    data = {"fleet": {"name": "t"}, "skus": {"hgx": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8}},
            "nodes": [{"names": ["n01"], "sku": "hgx", "driver": "550.90.07", "secure_boot": {"enabled": True, "enrolled": [sha1]}}]}
    node_spec = spec.parse(data).nodes[0].spec
    assert node_spec["secure_boot"] == {"enabled": True, "enrolled": [{"sha1": sha1, "cn": "gpusim enrolled key"}]}
    node = make_node(secure_boot=node_spec["secure_boot"])
    assert node.run("mokutil", "--sb-state").stdout == "SecureBoot enabled\n"
    assert sha1[:2] + ":" + sha1[2:4] in node.run("mokutil", "--list-enrolled").stdout
    assert node.state["modules"], "the driver the spec installs was signed by an enrolled key: it loads"
    data["nodes"][0]["secure_boot"] = {"enabled": "yes"}
    with pytest.raises(spec.SpecError, match=r"nodes\[0\]\.secure_boot\.enabled: must be true or false"):
        spec.parse(data)
    data["nodes"][0]["secure_boot"] = {"enabled": True, "enrolled": ["my key"]}
    with pytest.raises(spec.SpecError, match=r"nodes\[0\]\.secure_boot\.enrolled\[0\]"):
        spec.parse(data)


def test_runfile_signs_with_the_pair_given_and_the_module_loads(make_node, tmp_path):
    key, cert, sha1 = key_pair(tmp_path / "k")
    node = secure_node(make_node, sha1)
    run = artifacts.write_driver_runfile(node.dir / "art", NEW)
    unload(node)
    r = node.exec(str(run), "--silent", "--no-questions", "--dkms", "-m=kernel-open",
                  f"--module-signing-secret-key={key}", f"--module-signing-public-key={cert}")
    assert r.returncode == 0, r.stdout + r.stderr
    info = node.run("modinfo", "nvidia_uvm").stdout
    assert "signer:         fleet MOK\n" in info and "sig_key:        0A:BC\n" in info and "sig_id:         PKCS#7\n" in info
    assert node.run("modprobe", "nvidia").returncode == 0
    assert "nvidia" in node.state["modules"]


def test_key_not_enrolled_fails_the_runfile_at_its_test_load(make_node, tmp_path):
    key, cert, _sha1 = key_pair(tmp_path / "k")
    node = secure_node(make_node, "0" * 40)
    run = artifacts.write_driver_runfile(node.dir / "art", NEW)
    unload(node)
    r = node.exec(str(run), "--silent", "--no-dkms", f"--module-signing-secret-key={key}", f"--module-signing-public-key={cert}")
    assert r.returncode == 1
    assert "ERROR: The kernel module failed to load, because it was not signed by a key that is trusted by the kernel." in r.stdout
    assert node.state["driver"]["version"] == "550.90.07"


@pytest.mark.parametrize(("signature", "modprobe", "kernel"), [
    (dict(gsb.DKMS_OWN_KEY), "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n",
     "Loading of module with unavailable key is rejected"),
    (None, "modprobe: ERROR: could not insert 'nvidia': Operation not permitted\n",
     "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7"),
], ids=["untrusted-key", "unsigned"])
def test_the_kernel_refuses_modules_no_enrolled_key_signed(make_node, tmp_path, signature, modprobe, kernel):
    _k, _c, sha1 = key_pair(tmp_path / "k")
    node = secure_node(make_node, sha1)
    unload(node)
    st.update(node.dir, lambda s: s["driver"].update(signature=signature))
    r = node.run("modprobe", "nvidia")
    assert (r.returncode, r.stderr) == (1, modprobe)
    assert kernel in node.run("dmesg").stdout
    assert node.state["modules"] == []
    assert st.boot(node.dir) is True  # the boot loads nothing either: the GPUs are gone until the driver is signed
    assert node.state["modules"] == [] and kernel in node.run("dmesg").stdout


def test_dkms_signs_packages_with_the_framework_conf_pair(make_node, tmp_path, monkeypatch):
    key, cert, sha1 = key_pair(tmp_path / "k")
    node = secure_node(make_node, sha1)
    unload(node)
    etc = tmp_path / "root"
    monkeypatch.setenv("GPUSIM_ETC_ROOT", str(etc))
    r = node.run("apt-get", "install", "-y", f"nvidia-driver-570-open={NEW}-1")  # no drop-in: DKMS signs with its own key
    assert r.returncode == 0, r.stderr
    assert "signer:         DKMS module signing key" in node.run("modinfo", "nvidia").stdout
    assert "Key was rejected by service" in node.run("modprobe", "nvidia").stderr
    (etc / "etc/dkms/framework.conf.d").mkdir(parents=True)
    (etc / "etc/dkms/framework.conf.d/gpufleet-module-signing.conf").write_text(f'mok_signing_key="{key}"\nmok_certificate="{cert}"\n')
    r = node.run("apt-get", "install", "-y", "--allow-downgrades", "--allow-change-held-packages", "nvidia-driver-550-open=550.90.07-1")
    assert r.returncode == 0, r.stderr
    assert "signer:         fleet MOK" in node.run("modinfo", "nvidia").stdout
    assert node.run("modprobe", "nvidia").returncode == 0


def test_secure_boot_off_loads_anything(make_node):
    node = make_node(secure_boot=gsb.spec_value({"enabled": False}, "test"))
    unload(node)
    st.update(node.dir, lambda s: s["driver"].update(signature=None))
    assert node.run("modprobe", "nvidia").returncode == 0
    assert node.run("mokutil", "--sb-state").returncode == 1
