"""gpusim's PLDM firmware packages: built to DSP0267 1.0, read back by gpusim and by NVIDIA's own parser."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import struct
import subprocess
import zlib

import pytest
from gpusim import artifacts, firmware, opennvfwupd, pldm

COMPONENTS = {"HMC": "HGX-24.04-2", "GPU_SXM": "96.00.AF.00.01", "NVSwitch": "96.10.70.00.01",
              "ERoT": "01.03.0300.0000_n04"}
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")


@pytest.fixture
def package(tmp_path):
    return artifacts.write_fwpkg(tmp_path, "HGX-24.04-2", components=COMPONENTS, gpu_models=MODELS)


def _real_unpack_module():
    reason = opennvfwupd.unavailable()
    if reason:
        pytest.skip(reason)
    path = opennvfwupd.SOURCE / "nvfwupd" / "deps" / "fwpkg_unpack.py"
    spec = importlib.util.spec_from_file_location("fwpkg_unpack_real", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # standard library only
    return module


def test_round_trip(package):
    data = package.read_bytes()
    pkg = pldm.parse(data)
    assert pkg.version == "HGX-24.04-2"
    assert pkg.sha256 == hashlib.sha256(data).hexdigest() == artifacts.sha256_file(package)
    by_name = [(c.name, c.version, c.sku) for c in pkg.components]
    assert by_name == [("HMC", "HGX-24.04-2", None),
                       ("GPU_SXM", "96.00.AF.00.01", firmware.gpu_sku(MODELS[0])),
                       ("GPU_SXM", "96.00.AF.00.01", firmware.gpu_sku(MODELS[1])),
                       ("NVSwitch", "96.10.70.00.01", None), ("ERoT", "01.03.0300.0000_n04", None)]
    assert pkg.components[1].activation == ("medium_specific_reset", "system_reboot")
    assert pkg.components[3].activation == ("ac_power_cycle",)
    assert all(len(c.image) == 4096 for c in pkg.components)


def test_real_fwpkg_unpack_reads_it(package, tmp_path, monkeypatch):
    unpack = _real_unpack_module()
    monkeypatch.chdir(tmp_path)  # it logs to ./fwpkg_unpack_log.txt
    parser = unpack.PLDMUnpack()
    parser.unpack = False
    assert parser.unpack_pldm_package(str(package), str(tmp_path)) is True
    ok, text = parser.prepare_records_json()
    assert ok, text
    doc = json.loads(text)
    head = doc["PackageHeaderInformation"]
    assert head["PackageVersionString"] == "HGX-24.04-2"
    assert head["PackageSHA256"] == artifacts.sha256_file(package)
    assert head["PackageReleaseDateTime"].startswith("2024-10-25 12:0:0")
    records = {(r["ComponentImageSetVersionString"], r["Components"][0].get("APSKUID")): r["Components"][0]
               for r in doc["FirmwareDeviceRecords"]}
    gpu = records[("GPU_SXM", "0x" + firmware.gpu_sku(MODELS[0]))]
    assert gpu["ComponentVersionString"] == "96.00.AF.00.01"
    assert records[("NVSwitch", "N/A")]["ComponentVersionString"] == "96.10.70.00.01"
    # and it unpacks every image where the header says it lies
    parser = unpack.PLDMUnpack()
    assert parser.unpack_pldm_package(str(package), str(tmp_path / "out")) is True
    assert len(list((tmp_path / "out").glob("*_image.bin"))) == 5


def test_real_nvfwupd_package_parser(package, tmp_path):
    """nvfwupd's own PLDM class (what show_version -p uses) in its own venv: names, versions, SKUs."""
    reason = opennvfwupd.unavailable()
    if reason:
        pytest.skip(reason)
    try:
        py = opennvfwupd.ensure()
    except opennvfwupd.Unavailable as exc:
        pytest.skip(str(exc))
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from nvfwupd.pldm import PLDM; p = PLDM(); "
            "print(json.dumps([p.parse_pkg(sys.argv[2]), p.apname_version_dict]))")
    done = subprocess.run([str(py), "-c", code, str(opennvfwupd.SOURCE), str(package)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    status, names = json.loads(done.stdout.splitlines()[-1])
    assert status == [True, ""]
    sku = "0x" + firmware.gpu_sku(MODELS[1])
    assert names["HGX-24.04-2"][f"GPU_SXM,{sku}"] == ["96.00.AF.00.01", sku]
    assert names["HGX-24.04-2"]["HMC,"] == ["HGX-24.04-2", ""]


def _corrupt(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value):]


@pytest.mark.parametrize("mangle, message", [
    (lambda d: d[:10], "truncated: PackageHeaderIdentifier needs 16 bytes at offset 0"),
    (lambda d: d[:40], r"PackageHeaderSize \d+ exceeds the package \(40 bytes\)"),
    (lambda d: b"\0" * 16 + d[16:], "PackageHeaderIdentifier"),
    (lambda d: _corrupt(d, 16, b"\x02"), "FormatRevision is not 1"),
    (lambda d: _corrupt(d, 60, bytes([d[60] ^ 0xFF])), "ComponentImageSetVersionString is not ASCII"),
    (lambda d: d[:-100], "lies outside the package"),
    (lambda d: _corrupt(d, 32, b"\x03\x00"), "ComponentBitmapBitLength"),
])
def test_parse_refuses_broken_packages(package, mangle, message):
    with pytest.raises(pldm.PldmError, match=message):
        pldm.parse(mangle(package.read_bytes()))


def test_checksum_is_checked(package):
    data = bytearray(package.read_bytes())
    size = struct.unpack_from("<H", data, 17)[0]
    data[size - 5] ^= 0x01  # last byte of the last component version string, inside the checksummed header
    with pytest.raises(pldm.PldmError, match="PackageHeaderChecksum"):
        pldm.parse(bytes(data))
    assert zlib.crc32(bytes(data[:size - 4])) != struct.unpack_from("<I", data, size - 4)[0]


def test_unknown_component_and_bad_strings(tmp_path):
    with pytest.raises(ValueError, match="unknown firmware component 'GPU'"):
        artifacts.write_fwpkg(tmp_path, "HGX-1", components={"GPU": "1"})
    with pytest.raises(pldm.PldmError, match="ASCII"):
        pldm.build(pldm.Package(version="x" * 300, components=[pldm.Component("HMC", "1", 1)]))


def test_many_components():
    """200 device records (the bitmap grows to 200 bits) come back in order with their SKUs."""
    comps = [pldm.Component("GPU_SXM", f"96.00.{i:02X}.00.01", 0x60 + i, sku=f"{i:08x}", image=b"x") for i in range(200)]
    pkg = pldm.parse(pldm.build(pldm.Package(version="HGX-big", components=comps)))
    assert [c.sku for c in pkg.components] == [f"{i:08x}" for i in range(200)]
    assert pkg.components[-1].version == "96.00.C7.00.01"
