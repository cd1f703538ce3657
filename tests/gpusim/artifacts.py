"""Files the simulated fleet consumes: driver .run files, PLDM .fwpkg firmware packages, NIC images.

Each is small, deterministic for its arguments, and has a real sha256 of its bytes (the playbooks
verify it before use)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from . import firmware, pldm

RUNFILE = """#!/bin/sh
# NVIDIA-Linux-x86_64-{version}.run -- simulated NVIDIA driver installer (gpusim).
# A makeself-style wrapper: checks itself, then hands the real installer flags to
# gpusim-run-installer, which installs into the simulated node's state.
VERSION='{version}'
FAIL='{fail}'
case " $* " in
  *" --check "*) echo "Verifying archive integrity... OK"; exit 0 ;;
  *" --info "*) echo "Identification: NVIDIA Accelerated Graphics Driver for Linux-x86_64 $VERSION"; exit 0 ;;
esac
if [ "$FAIL" = checksum ]; then
  echo "Verifying archive integrity... Error in MD5 checksums: {md5a} is different from {md5b}"
  exit 1
fi
echo "Verifying archive integrity... OK"
echo "Uncompressing NVIDIA Accelerated Graphics Driver for Linux-x86_64 $VERSION........................"
exec "${{GPUSIM_RUN_INSTALLER:-gpusim-run-installer}}" --runfile-version="$VERSION" --runfile-fail="$FAIL" -- "$@"
exit 1
# payload
{payload}
"""


def sha256_file(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def _payload(seed: str, lines: int = 64) -> str:
    out = []
    h = hashlib.sha256(seed.encode()).hexdigest()
    for _ in range(lines):
        h = hashlib.sha256(h.encode()).hexdigest()
        out.append("# " + h + h)
    return "\n".join(out)


def write_driver_runfile(dir: Path | str, version: str, *, fail: str | None = None) -> Path:
    """NVIDIA-Linux-x86_64-<version>.run. fail: None | "dkms" | "headers" | "checksum"."""
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"NVIDIA-Linux-x86_64-{version}.run"
    md5 = hashlib.md5(version.encode()).hexdigest()  # noqa: S324 - mimics makeself's message, not security
    text = RUNFILE.format(version=version, fail=fail or "", md5a=md5, md5b=md5[::-1],
                          payload=_payload(f"runfile/{version}/{fail}"))
    path.write_text(text)
    os.chmod(path, 0o755)  # noqa: S103 - a .run file must be executable
    return path


def write_fwpkg(dir: Path | str, version: str, *, components: dict[str, str] | None = None,
                gpu_models: tuple[str, ...] = ("NVIDIA H100 80GB HBM3",), package: str | None = None) -> Path:
    """nvfw_<package>-signed.fwpkg: a real PLDM package (DSP0267 1.0) that NVIDIA's nvfwupd parses.

    version is the PackageVersionString (the HGX bundle, e.g. HGX-24.04-2); components maps PLDM record
    names (gpusim.firmware.RECORDS: HMC, GPU_SXM, NVSwitch, ERoT, PCIeSwitch, FPGA, CPLD) to versions
    (default: the HMC at `version`). A GPU_SXM version goes in once per GPU model of gpu_models, with that
    model's SKU, so that it applies to those GPUs only. The sha256 of the file: sha256_file(path)."""
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    wanted = dict(components) if components is not None else {"HMC": version}
    comps = []
    for record, comp_version in wanted.items():
        if record not in firmware.COMPONENT_IDS:
            raise ValueError(f"gpusim: unknown firmware component {record!r}; known: {', '.join(firmware.RECORDS)}")
        if record == firmware.GPU_RECORD:
            reset, skus = firmware.GPU_RESET, [firmware.gpu_sku(m) for m in gpu_models]
        else:
            known = list(firmware.HGX_COMPONENTS.values()) + list(firmware.HOST_COMPONENTS.values())
            reset = next((r for rec, r, _v in known if rec == record), firmware.NVSWITCH[1])
            skus = [None]
        for n, sku in enumerate(skus):
            comps.append(pldm.Component(name=record, version=comp_version, identifier=firmware.COMPONENT_IDS[record] + n,
                                        activation=firmware.PLDM_ACTIVATION[reset], sku=sku))
    path = d / f"nvfw_{package or version + '_prod'}-signed.fwpkg"
    path.write_bytes(pldm.build(pldm.Package(version=version, components=comps)))
    return path


def write_host_image(dir: Path | str, component: str, version: str) -> Path:
    """The host BMC's or BIOS's firmware image: a PLDM package (as write_fwpkg) holding one component,
    HostBMC or HostBIOS, at `version`, which the simulated BMC reads from the package. component:
    "bmc" or "bios". The file: host-<component>-<version>.fwpkg; its sha256: sha256_file(path)."""
    records = {"bmc": "HostBMC", "bios": "HostBIOS"}
    if component not in records:
        raise ValueError(f"gpusim: a host image is for 'bmc' or 'bios', not {component!r}")
    built = write_fwpkg(dir, version, components={records[component]: version}, package=f"host-{component}-{version}")
    return built.rename(built.with_name(f"host-{component}-{version}.fwpkg"))


def write_mlx_image(dir: Path | str, psid: str, fw: str, *, part_number: str = "MCX755106AS-HEA_Ax",
                    nic_type: str = "ConnectX-7") -> Path:
    """fw-<type>-rel-<fw>-<part>.bin; mlxfwmanager/flint accept it for devices with the same PSID."""
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    tname = nic_type.replace("-", "").replace(" ", "")
    path = d / f"fw-{tname}-rel-{fw.replace('.', '_')}-{part_number}-{psid}.bin"
    header = {"format": "gpusim-mlx", "psid": psid, "fw": fw, "part_number": part_number, "type": nic_type}
    path.write_bytes(json.dumps(header, sort_keys=True).encode() + b"\n" + _payload(f"mlx/{psid}/{fw}").encode())
    return path
