"""MLNX_OFED / DOCA-OFED on a simulated node (issue 24): the spec key, the installed and the loaded stack, the bundle.

Spec (nodes[i].ofed)::

    ofed: {flavor: doca-ofed, version: 24.04-0.6.6, repo: 24.10-1.1.4.0.200, opensm: false, nvme_rdma: false,
           fw_updater: false, dkms: true}

becomes the node state's ``stack.ofed`` = ``{"flavor", "version", "loaded", "fw_updater", "repo"}`` (``version``: what
``ofed_info -s`` prints, the installed stack; ``loaded``: the stack the kernel runs, until ``openibd restart`` or a
boot loads the installed one; ``repo``: the DOCA-OFED release the node's apt repository offers, None: none),
``services.opensmd`` (opensm running holds the stack) and ``stack.nvme_rdma`` (nvme-rdma holds mlx_compat).
``fw_updater`` is the ``mlnx-fw-updater`` package; ``dkms: true`` makes the node's driver DKMS-built (``dkms status``
lists it, and ``dkms build|install`` can rebuild its nvidia_peermem), as the driver packages and ``--dkms`` runfiles are.

``driver["peermem_ofed"]`` is the OFED that the driver's nvidia_peermem was built against (its Module.symvers, NVIDIA's
Kbuild): set when the driver is installed or DKMS rebuilds it, and kept by an OFED install, so that after an OFED change
nvidia_peermem refuses to load (``Unknown symbol ib_register_peer_memory_client``) until it is rebuilt.

Every OFED release bundles an adapter firmware (NVIDIA's legal notices pages,
../shared/fixtures/real/stack/ofed/DERIVED_mlnx_ofed_bundled_firmware_by_release_NVIDIA-legal-notices.csv): an install
that runs the firmware updater burns it into every adapter whose firmware is older (on flash: it runs after a reset).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

FLAVORS = ("doca-ofed", "mlnx-ofed")
VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}-[0-9]+(?:\.[0-9]+){1,4}")
# OFED release (year.month) -> the bundled firmware's minor and sub-minor, per the DERIVED csv's rows (23.10-1.1.9.0:
# xx.39.2048, 24.10-1.1.4.0: xx.43.2026, ...); a release not listed gets its year's branch (39 + 4 a year).
BUNDLED = {"23.07": "38.1002", "23.10": "39.2048", "24.04": "41.1000", "24.07": "42.1000", "24.10": "43.2026", "25.01": "44.1000",
           "25.04": "45.1020", "25.07": "46.1006", "25.10": "47.1088"}
_KEYS = {"flavor", "version", "repo", "opensm", "nvme_rdma", "fw_updater", "dkms"}
OPENIB_CONF = "/etc/infiniband/openib.conf"
BUNDLE_SCRIPT = """#!/bin/sh
# mlnxofedinstall of MLNX_OFED_LINUX-{version} -- simulated (gpusim): hands its options to gpusim-mlnxofedinstall, which
# installs into the simulated node's state and prints what the real one prints.
exec "${{GPUSIM_OFED_INSTALLER:-gpusim-mlnxofedinstall}}" --bundle-version={version} -- "$@"
"""


def spec_value(value: Any, where: str) -> dict[str, Any]:
    """nodes[i].ofed checked; ValueError naming ``where``."""
    if not isinstance(value, dict) or set(value) - _KEYS:
        raise ValueError(f"{where}: must be a mapping with {', '.join(sorted(_KEYS))}")
    if value.get("flavor") not in FLAVORS:
        raise ValueError(f"{where}.flavor: must be one of {', '.join(FLAVORS)} (leave ofed out for the inbox stack)")
    for key in ("version", "repo"):
        if (key == "version" or value.get(key) is not None) and not VERSION.fullmatch(str(value.get(key, ""))):
            raise ValueError(f"{where}.{key}: must be an OFED release as ofed_info -s prints it (24.10-1.1.4.0), got {value.get(key)!r}")
    for key in ("opensm", "nvme_rdma", "fw_updater", "dkms"):
        if not isinstance(value.get(key, False), bool):
            raise ValueError(f"{where}.{key}: must be true or false")
    return dict(value)


def init(state: dict[str, Any], value: dict[str, Any]) -> None:
    """The node's OFED at creation (its nvidia_peermem built against it)."""
    stack = state.setdefault("stack", {})
    stack["ofed"] = {"flavor": value["flavor"], "version": value["version"], "loaded": value["version"],
                     "fw_updater": bool(value.get("fw_updater")), "repo": value.get("repo")}
    stack["nvme_rdma"] = bool(value.get("nvme_rdma"))
    state["services"]["opensmd"] = {"enabled": bool(value.get("opensm")), "active": bool(value.get("opensm")), "since": 0, "pid": 1632,
                                    "failed_reason": None}
    if value.get("dkms"):
        state["driver"]["dkms"] = True
        stack.setdefault("dkms", {})
    if state["driver"].get("version"):
        state["driver"]["peermem_ofed"] = identity(state)


def identity(state: dict[str, Any], loaded: bool = False) -> str:
    """The OFED a module builds against (the installed one) or loads against (``loaded``): ``flavor-version``, ``inbox``."""
    ofed = (state.get("stack") or {}).get("ofed")
    if not ofed:
        return "inbox"
    return f"{ofed['flavor']}-{ofed['loaded' if loaded else 'version']}"


def peermem_unresolved(state: dict[str, Any]) -> bool:
    """True when nvidia_peermem was built against another OFED than the kernel runs: its ib_* symbols do not resolve."""
    built = state["driver"].get("peermem_ofed")
    return built is not None and built != identity(state, loaded=True)


def boot(state: dict[str, Any]) -> None:
    """A boot loads the installed stack."""
    ofed = (state.get("stack") or {}).get("ofed")
    if ofed:
        ofed["loaded"] = ofed["version"]


def bundled_firmware(release: str, current: str) -> str:
    """The firmware an OFED ``release`` bundles for an adapter running ``current`` (its family prefix kept)."""
    year_month = ".".join(release.split("-", 1)[0].split(".")[:2])
    bundled = BUNDLED.get(year_month)
    if bundled is None:
        year = int(year_month.split(".")[0])
        bundled = f"{39 + 4 * (year - 23)}.1000"
    return f"{current.split('.', 1)[0]}.{bundled}"


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", version))


def older(current: str, bundled: str) -> bool:
    return _vkey(current) < _vkey(bundled)


def write_bundle(folder: Path | str, version: str, distro: str = "ubuntu22.04-x86_64") -> Path:
    """MLNX_OFED_LINUX-<version>-<distro>.tgz holding MLNX_OFED_LINUX-<version>-<distro>/mlnxofedinstall (sha256: of its bytes)."""
    import io
    import tarfile
    from pathlib import Path

    name = f"MLNX_OFED_LINUX-{version}-{distro}"
    path = Path(folder) / f"{name}.tgz"
    path.parent.mkdir(parents=True, exist_ok=True)
    script = BUNDLE_SCRIPT.format(version=version).encode()
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for member, data, mode in ((f"{name}/mlnxofedinstall", script, 0o755), (f"{name}/.mlnx", f"{version}\n".encode(), 0o644)):
            info = tarfile.TarInfo(member)
            info.size, info.mode, info.mtime = len(data), mode, 1700000000
            tar.addfile(info, io.BytesIO(data))
    return path


def write_bundles(folder: Path | str, versions) -> dict[str, dict[str, str]]:
    """A bundle of each release in ``versions``, as the ofed role's ``ofed_bundles`` takes them: {version: {path, checksum}}."""
    from . import artifacts

    bundles = {}
    for version in versions:
        path = write_bundle(folder, version)
        bundles[version] = {"path": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    return bundles
