"""The simulated artifact repository of a molecule scenario's fleet: what a site keeps in group_vars/all.

    python tests/molecule/artifacts.py --spec SPEC --workdir WORKDIR

Run by extensions/molecule/shared/create.yml after `gpusim up`. From the spec (its nodes and the BOMs of its SKUs)
it writes, under WORKDIR/artifacts, one real-format file per version the fleet has or its BOMs want (gpusim.artifacts):
driver runfiles, ConnectX images, HGX firmware packages; and WORKDIR/inventory/group_vars/all/artifacts.yml with
the variables that point at them, each with its sha256 (a site's own repository has the same shape):

    nvidia_driver_runfiles: {VERSION: {source: PATH, checksum: sha256:HEX}}
    nic_firmware_images: {PSID: {FW: {path: PATH, checksum: sha256:HEX}}}
    gpu_firmware_packages: {BUNDLE: {package: PATH, checksum: sha256:HEX}}
    gpu_firmware_nvfwupd_path / gpu_firmware_nvfwupd_interpreter   (when NVIDIA's open-nvfwupd is installed)

A BOM's gpu_firmware is {version: BUNDLE, components: {HMC: ..., GPU_SXM: ...}} (PLDM record names); without
components the package holds the HMC at BUNDLE. The nodes share the controller's /tmp, so the paths are valid on
every node (tests/gpusim/README.md, "What a node is"). Writes nothing and exits 2 with the reason on a bad spec.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import artifacts, opennvfwupd, spec  # noqa: E402


def _sha(path: Path) -> str:
    return "sha256:" + artifacts.sha256_file(path)


def repository(fleet: spec.Fleet, out: Path) -> dict:
    """Write the artifacts the fleet's nodes and BOMs name under out; return the variables that point at them."""
    drivers, nics, bundles = set(), {}, {}
    for node in fleet.nodes:
        if node.spec["driver"]:
            drivers.add(node.spec["driver"])
        for nic in node.spec["nics"]:
            nics.setdefault((nic["psid"], nic["fw"]), nic)
    for sku in fleet.skus.values():
        bom = sku.get("bom") or {}
        if (bom.get("driver") or {}).get("version"):
            drivers.add(str(bom["driver"]["version"]))
        known = {nic["psid"]: nic for nic in sku["nics"]}
        for psid, fw in (bom.get("nic_firmware") or {}).items():
            if psid not in known:
                raise SystemExit(f"bom.nic_firmware: PSID {psid} is on no NIC of its SKU ({', '.join(known) or 'none'})")
            nics.setdefault((psid, str(fw)), known[psid])
        firmware = bom.get("gpu_firmware") or {}
        if firmware.get("version"):
            bundle = str(firmware["version"])
            bundles.setdefault(bundle, (dict(firmware.get("components") or {"HMC": bundle}), set()))[1].add(sku["gpu_model"])
    runfiles = {}
    for version in sorted(drivers):
        path = artifacts.write_driver_runfile(out / "drivers", version)
        runfiles[version] = {"source": str(path), "checksum": _sha(path)}
    images: dict[str, dict] = {}
    for (psid, fw), nic in sorted(nics.items()):
        path = artifacts.write_mlx_image(out / "nic", psid, fw, part_number=nic["part_number"], nic_type=nic["type"])
        images.setdefault(psid, {})[fw] = {"path": str(path), "checksum": _sha(path)}
    packages = {}
    for bundle, (components, models) in sorted(bundles.items()):
        path = artifacts.write_fwpkg(out / "gpu", bundle, components=components, gpu_models=tuple(sorted(models)))
        packages[bundle] = {"package": str(path), "checksum": _sha(path)}
    variables: dict = {"nvidia_driver_runfiles": runfiles, "nic_firmware_images": images, "gpu_firmware_packages": packages}
    if opennvfwupd.unavailable() is None and opennvfwupd.python().exists():
        variables["gpu_firmware_nvfwupd_path"] = str(opennvfwupd.SOURCE / "nvfwupd.py")
        variables["gpu_firmware_nvfwupd_interpreter"] = str(opennvfwupd.python())
    return variables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        fleet = spec.load(args.spec)
    except spec.SpecError as exc:
        sys.stderr.write(f"artifacts: {exc}\n")
        return 2
    variables = repository(fleet, args.workdir / "artifacts")
    target = args.workdir / "inventory" / "group_vars" / "all" / "artifacts.yml"
    target.parent.mkdir(parents=True, exist_ok=True)
    header = f"# The simulated artifact repository of {args.spec} (tests/molecule/artifacts.py)\n"
    target.write_text(header + yaml.safe_dump(variables, sort_keys=True))
    sys.stdout.write(f"artifacts: {target}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
