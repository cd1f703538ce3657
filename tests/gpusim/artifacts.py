"""Files the simulated fleet consumes: driver .run files, nvfwupd .fwpkg packages, NIC images.

Each is small, deterministic for its arguments, and has a real sha256 of its bytes (the playbooks
verify it before use)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

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
                system: str = "HGX", package: str | None = None) -> Path:
    """nvfw_<system>_<version>_prod-signed.fwpkg; components maps AP name or family (HGX_FW_GPU) to version."""
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    package = package or f"{system}_{version}_prod"
    path = d / f"nvfw_{package}-signed.fwpkg"
    header = {"format": "gpusim-fwpkg", "package": package, "version": version, "system": system,
              "components": components or {"HGX_FW_BMC_0": version, "HGX_FW_GPU": "96.00.AF.00.01"}}
    path.write_bytes(json.dumps(header, sort_keys=True).encode() + b"\n" + _payload(f"fwpkg/{package}").encode())
    return path


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
