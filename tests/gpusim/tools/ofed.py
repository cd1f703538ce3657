"""Simulated OFED tools (issue 24): mlnxofedinstall (behind a bundle's script), openibd, DOCA-OFED through apt-get and
dpkg-query, and DKMS rebuilding the NVIDIA modules against a new OFED.

They print the formats of ../shared/fixtures/real/stack/ofed/ (the MLNX_OFED install log, mlnx-fw-updater's firmware
step as mlxfwmanager prints it, ``Skipping FW update.``, openibd's ``[  OK  ]`` column and its refusals) from the node
state (gpusim/ofed.py). What the real tools do that matters here:

- an install without ``--without-fw-update`` (mlnxofedinstall) or with the ``mlnx-fw-updater`` package (DOCA-OFED)
  burns the release's bundled firmware into every adapter whose firmware is older: the flash changes, the running
  firmware only after a reset (``Restart needed for updates to take effect.``);
- ``ofed_info -s`` names the installed release at once; the kernel keeps the loaded stack until ``openibd restart`` or a
  boot, and openibd refuses while opensm holds ``issm0`` / ``umad0``, fails while nvme-rdma holds ``mlx_compat`` or
  nvidia_peermem holds ``ib_core``;
- nvidia_peermem built against another OFED fails to load (kmod.py asks ``peermem_refusal``) until DKMS rebuilds the
  NVIDIA modules (``dkms build|install -m nvidia -v V -k K --force``) or the driver is installed again.
"""

from __future__ import annotations

import os

from .. import ofed as sim_ofed
from .. import secureboot
from ._common import err, fail, load, out, scaled_sleep, update

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

INSTALLER_FLAGS = {"--without-fw-update", "--force", "-q", "--add-kernel-support", "--skip-distro-check", "--all", "--with-nvmf",
                   "--with-nfsrdma", "--skip-unsupported-devices-check", "--force-fw-update", "--dpdk", "--upstream-libs", "--hpc", "--basic"}
OFED_PACKAGES = ("doca-ofed", "mlnx-ofed-all", "mlnx-ofed-basic", "mlnx-fw-updater")
FW_UPDATER = "mlnx-fw-updater"
PEERMEM_SYMBOLS = ("ib_register_peer_memory_client", "ib_unregister_peer_memory_client")
COLUMN = 59  # openibd's status column


def is_ofed_package(spec: str) -> bool:
    return spec.rstrip("-").split("=", 1)[0] in OFED_PACKAGES


# --- the firmware step of mlnx-fw-updater (mlxfwmanager's format) ------------------------------------------------------

def _firmware_step(state: dict[str, Any], release: str, indent: str) -> tuple[list[str], dict[int, str]]:
    """The updater's lines and {nic index: firmware burnt}: every adapter older than the bundled image is burnt."""
    lines = ["Attempting to perform Firmware update...", "Querying Mellanox devices firmware ...", ""]
    burnt = {}
    for n, nic in enumerate(state["nics"], 1):
        flashed = nic.get("staged_fw") or nic["fw"]
        bundled = sim_ofed.bundled_firmware(release, flashed)
        update_needed = sim_ofed.older(flashed, bundled)
        if update_needed:
            burnt[n - 1] = bundled
        lines += [f"Device #{n}:", "----------", "", f"{indent}Device Type:      {nic['type'].replace('-', '')}",
                  f"{indent}Part Number:      {nic['part_number']}", f"{indent}PSID:             {nic['psid']}",
                  f"{indent}PCI Device Name:  {nic['pci']}", f"{indent}Versions:         Current        Available",
                  f"{indent}   FW             {flashed:<15}{bundled}", "",
                  f"{indent}Status:           {'Update required' if update_needed else 'Up to date'}", ""]
    if burnt:
        lines += ["---------", f"Found {len(burnt)} device(s) requiring firmware update...", ""]
        for n, _index in enumerate(burnt, 1):
            lines += [f"Device #{n}: Updating FW ...", "Done"]
        lines += ["", "Restart needed for updates to take effect."]
    return lines, burnt


def _burn(state: dict[str, Any], burnt: dict[int, str]) -> None:
    for index, version in burnt.items():
        state["nics"][index]["staged_fw"] = version


def _installed(state: dict[str, Any], flavor: str, version: str, fw_updater: bool) -> None:
    """The new stack on disk: ofed_info names it, the kernel still runs the loaded one; nvidia_peermem keeps its build."""
    stack = state.setdefault("stack", {})
    previous = stack.get("ofed")
    if state["driver"].get("version") and "peermem_ofed" not in state["driver"]:
        state["driver"]["peermem_ofed"] = sim_ofed.identity(state)
    stack["ofed"] = {"flavor": flavor, "version": version, "loaded": (previous or {}).get("loaded"),
                     "fw_updater": fw_updater or bool((previous or {}).get("fw_updater")), "repo": (previous or {}).get("repo")}


def _write_openib_conf() -> None:
    """The installer's `Added 'RUN_FW_UPDATER_ONBOOT=no to /etc/infiniband/openib.conf` (the node's own /etc)."""
    try:
        os.makedirs(os.path.dirname(sim_ofed.OPENIB_CONF), exist_ok=True)
        with open(sim_ofed.OPENIB_CONF, "w") as handle:
            handle.write("# Start HCA driver upon boot\nONBOOT=yes\nRUN_FW_UPDATER_ONBOOT=no\n")
    except OSError:
        pass  # outside a node's namespace (unit tests): the state is what the other tools read


# --- mlnxofedinstall -----------------------------------------------------------------------------------------------

def installer_main(argv: list[str]) -> int:
    """`gpusim-mlnxofedinstall --bundle-version=V -- ARGS`: MLNX_OFED's installer of release V."""
    version = next((a.split("=", 1)[1] for a in argv if a.startswith("--bundle-version=")), None)
    args = argv[argv.index("--") + 1:] if "--" in argv else []
    if not version:
        fail("gpusim-mlnxofedinstall: --bundle-version=<release> is required (the bundle's script passes it)", 2)
    for arg in args:
        if arg not in INSTALLER_FLAGS and not arg.startswith("--fw-image-dir"):
            fail(f"Unsupported option: {arg}\nRun: mlnxofedinstall --help for the list of options", 22)
    pid = os.getpid()
    logs = f"/tmp/MLNX_OFED_LINUX.{pid}.logs"
    lines = [f"Logs dir: {logs}", f"General log file: {logs}/general.log", ""]
    if "--force" not in args:
        out("\n".join([*lines, "This program will install the MLNX_OFED_LINUX package on your machine.",
                       "Note that all other Mellanox, OEM, OFED, RDMA or Distribution IB packages will be removed.",
                       "Those packages are removed due to conflicts with MLNX_OFED_LINUX, do not reinstall them.", "",
                       "Do you want to continue?[y/N]:"]))
        fail("Aborted.", 1, "out")
    state = load()
    scaled_sleep(float((state.get("timing") or {}).get("ofed_install", 1.0)))
    lines += ["This program will install the MLNX_OFED_LINUX package on your machine.",
              "Note that all other Mellanox, OEM, OFED, RDMA or Distribution IB packages will be removed.",
              "Those packages are removed due to conflicts with MLNX_OFED_LINUX, do not reinstall them.", "",
              f"Starting MLNX_OFED_LINUX-{version} installation ...", ""]
    for package in ("ofed-scripts", "mlnx-tools", "mlnx-ofed-kernel-utils", "mlnx-ofed-kernel-dkms", "rdma-core", "libibverbs1",
                    "ibverbs-utils", "infiniband-diags", "opensm", "mstflint", "mft", "kernel-mft-dkms", "ucx", "hcoll", "openmpi"):
        lines.append(f"Installing {package}...")
    for nic in state["nics"]:
        lines += [f"Device ({nic['pci'][5:]}):", f"\t{nic['pci'][5:]} Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]",
                  "\tLink Width: x16", "\tPCI Link Speed: 16GT/s", ""]
    lines += ["Installation passed successfully", "", f"Selecting previously unselected package {FW_UPDATER}.",
              f"Preparing to unpack .../{FW_UPDATER}_{version}_amd64.deb ...", f"Unpacking {FW_UPDATER} ({version}) ...",
              f"Setting up {FW_UPDATER} ({version}) ...", "", f"Added 'RUN_FW_UPDATER_ONBOOT=no to {sim_ofed.OPENIB_CONF}", ""]
    burnt: dict[int, str] = {}
    if "--without-fw-update" in args:
        lines.append("Skipping FW update.")
    else:
        step, burnt = _firmware_step(state, version, "  ")
        lines += [*step, f"Log File: {logs}/fw_update.log"]
    lines += ["To load the new driver, run:", "/etc/init.d/openibd restart",
              "Note: In order to load the new nvme-rdma and nvmet-rdma modules, the nvme module must be reloaded."]

    def _apply(s: dict[str, Any]) -> None:
        _installed(s, "mlnx-ofed", version, fw_updater=True)
        _burn(s, burnt)

    update(_apply)
    _write_openib_conf()
    out("\n".join(lines))
    return 0


# --- openibd -------------------------------------------------------------------------------------------------------

def _step(text: str, ok: bool) -> str:
    return f"{text:<{COLUMN}}{'[  OK  ]' if ok else '[FAILED]'}"


def openibd_main(argv: list[str]) -> int:
    state = load()
    ofed = (state.get("stack") or {}).get("ofed")
    if not ofed:
        err("bash: /etc/init.d/openibd: No such file or directory")
        return 127
    verb = argv[0] if argv else ""
    if verb == "status":
        out(f"  HCA driver loaded\n\nConfigured devices:\n\nCurrently active devices:\n\nThe following OFED modules are loaded:\n\n  rdma_ucm\n  ib_uverbs\n"
            f"  mlx5_core (MLNX_OFED {ofed.get('loaded')})")
        return 0
    if verb not in ("restart", "start", "stop", "force-restart"):
        err("Usage: /etc/init.d/openibd {start|force-start|stop|force-stop|restart|force-restart|status}")
        return 1
    if state["services"].get("opensmd", {}).get("active"):
        out('Please stop "opensm" and all applications running over InfiniBand.\n\nPlease stop the following applications still using '
            "Infiniband devices:\nopensm(1632) user root is using device issm0\nopensm(1632) user root is using device umad0\n\n\n"
            "Error: Cannot unload the Infiniband driver stack due to the above issue(s)!\n\nOnce the above issue(s) resolved, run:\n"
            "# /etc/init.d/openibd restart")
        return 1
    if (state.get("stack") or {}).get("nvme_rdma"):
        out(_step("Unloading mlx_compat", False) + "\nrmmod: ERROR: Module mlx_compat is in use by: nvme_core nvme_fabrics")
        return 1
    if "nvidia_peermem" in state["modules"]:
        out(_step("Unloading ib_core", False) + "\nrmmod: ERROR: Module ib_core is in use by: nvidia_peermem")
        return 1
    scaled_sleep(float((state.get("timing") or {}).get("openibd", 0.2)))

    def _reload(s: dict[str, Any]) -> None:
        s["stack"]["ofed"]["loaded"] = s["stack"]["ofed"]["version"]

    update(_reload)
    out(_step("Unloading HCA driver:", True) + "\n" + _step("Loading HCA driver and Access Layer:", True))
    return 0


# --- modprobe nvidia_peermem (asked by kmod.py) ----------------------------------------------------------------------

def peermem_refusal(state: dict[str, Any]) -> list[str] | None:
    """The kernel's lines when nvidia_peermem cannot resolve its ib_* symbols (built against another OFED), else None."""
    if not sim_ofed.peermem_unresolved(state):
        return None
    return [f"nvidia_peermem: Unknown symbol {symbol} (err -2)" for symbol in PEERMEM_SYMBOLS]


# --- DKMS rebuilding the NVIDIA modules (asked by stack.py's dkms) -------------------------------------------------------

def dkms_main(argv: list[str]) -> int:
    """`dkms build|install -m nvidia -v VERSION -k KERNEL [--force]`: rebuilds nvidia_peermem against the installed OFED."""
    state = load()
    verb, opts = argv[0], dict(zip(argv[1::2], argv[2::2]))
    module, version, kernel = opts.get("-m"), opts.get("-v"), opts.get("-k", state["kernel"])
    drv = state["driver"]
    if module != "nvidia" or not version or version != drv.get("version") or not drv.get("dkms"):
        err(f"Error! The module/version combo: {module}-{version} is not located in the DKMS tree.")
        return 3
    if kernel != state["kernel"]:
        err(f"Error! Your kernel headers for kernel {kernel} cannot be found at /lib/modules/{kernel}/build or /lib/modules/{kernel}/source.")
        return 1
    if verb == "build":
        # DKMS signs every module it builds with the pair its configuration names (framework.conf, framework.conf.d/*.conf),
        # else with one it generates, which nobody enrolled (DKMS 3 output: ../shared/fixtures/real/stack/dkms/).
        key, cert = secureboot.dkms_signing_pair()
        signature = secureboot.dkms_signature()
        scaled_sleep(float((state.get("timing") or {}).get("dkms_build", 0.2)))
        update(lambda s: s["driver"].__setitem__("dkms_built_signature", signature))
        out(f"Sign command: /lib/modules/{kernel}/build/scripts/sign-file\nSigning key: {key}\nPublic certificate (MOK): {cert}\n\n"
            f"Building module(s).......... done.\n"
            + "".join(f"Signing module /var/lib/dkms/nvidia/{version}/build/{name}.ko\n"
                      for name in ("nvidia", "nvidia-modeset", "nvidia-drm", "nvidia-uvm", "nvidia-peermem")))
        return 0

    unbuilt = secureboot.dkms_signature()  # an install without a build first builds (and signs) then

    def _rebuilt(s: dict[str, Any]) -> None:
        s["driver"]["peermem_ofed"] = sim_ofed.identity(s)
        # `install --force` replaces every module of the driver on disk with the ones just built (and signed): the loaded
        # ones keep running; the next load (nvidia_peermem now, nvidia at the next boot) meets the new signature.
        built = s["driver"].pop("dkms_built_signature", None)
        s["driver"]["signature"] = built if built is not None else unbuilt

    update(_rebuilt)
    out(f"\nnvidia-peermem.ko.zst:\nRunning module version sanity check.\n - Original module\n   - No original module exists within this kernel\n"
        f" - Installation\n   - Installing to /lib/modules/{kernel}/updates/dkms/\n\ndepmod....")
    return 0


# --- apt-get and dpkg-query for DOCA-OFED (asked by packages.py) ------------------------------------------------------------

def dpkg_installed(state: dict[str, Any]) -> dict[str, str]:
    """The OFED packages in the dpkg database: {name: version}."""
    ofed = (state.get("stack") or {}).get("ofed") or {}
    pkgs = {}
    if ofed.get("flavor") == "doca-ofed":
        pkgs["doca-ofed"] = ofed["version"]
    if ofed.get("fw_updater"):
        pkgs[FW_UPDATER] = ofed["version"]
    return pkgs


def apt_main(verb: str, names: list[str]) -> int:
    """`apt-get install|remove` of DOCA-OFED's packages from the node's repository (stack.ofed.repo)."""
    state = load()
    ofed = (state.get("stack") or {}).get("ofed") or {}
    head = "Reading package lists...\nBuilding dependency tree...\nReading state information..."
    if verb in ("remove", "purge"):
        if FW_UPDATER in names and ofed.get("fw_updater"):
            update(lambda s: s["stack"]["ofed"].update(fw_updater=False))
            out(f"{head}\nThe following packages will be REMOVED:\n  {FW_UPDATER}\nRemoving {FW_UPDATER} ({ofed.get('version')}) ...")
        else:
            out(f"{head}\nPackage '{FW_UPDATER}' is not installed, so not removed")
        return 0
    repo = ofed.get("repo")
    wanted = [n for n in names if not n.endswith("-")]
    kept_out = [n[:-1] for n in names if n.endswith("-")]
    for name in wanted:
        if name.split("=", 1)[0] not in ("doca-ofed", FW_UPDATER) or not repo:
            out(head)
            fail(f"E: Unable to locate package {name}", 100)
    lines = [head]
    for name in kept_out:
        if name == FW_UPDATER and not ofed.get("fw_updater"):
            lines.append(f"Package '{FW_UPDATER}' is not installed, so not removed")
    scaled_sleep(float((state.get("timing") or {}).get("ofed_install", 1.0)))
    lines += [f"Setting up doca-ofed ({repo}) ...", f"Setting up mlnx-ofed-kernel-dkms ({repo}) ...", f"Setting up ofed-scripts ({repo}) ..."]
    burnt: dict[int, str] = {}
    with_updater = FW_UPDATER in [n.split("=", 1)[0] for n in wanted]
    if with_updater:
        # The DOCA capture: the updater's device blocks are not indented, and it burns at once.
        step, burnt = _firmware_step(state, repo, "")
        lines += [f"Setting up {FW_UPDATER} ({repo}) ...", *step]

    def _apply(s: dict[str, Any]) -> None:
        _installed(s, "doca-ofed", repo, fw_updater=with_updater)
        if FW_UPDATER in kept_out:
            s["stack"]["ofed"]["fw_updater"] = False
        _burn(s, burnt)

    update(_apply)
    out("\n".join(lines))
    return 0


def dpkg_query(patterns: list[str], fmt: str) -> int:
    """`dpkg-query -W -f FORMAT NAME...` of OFED packages."""
    pkgs = dpkg_installed(load())
    rc = 0
    for pattern in patterns:
        if pattern not in pkgs:
            err(f"dpkg-query: no packages found matching {pattern}")
            rc = 1
            continue
        text = fmt.replace("${Package}", pattern).replace("${binary:Package}", pattern).replace("${Version}", pkgs[pattern])
        text = text.replace("${db:Status-Abbrev}", "ii ").replace("\\n", "\n").replace("\\t", "\t")
        out(text, end="")
    return rc


__all__ = ["apt_main", "dkms_main", "dpkg_query", "installer_main", "is_ofed_package", "openibd_main", "peermem_refusal"]
