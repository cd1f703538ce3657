"""Simulated node tools: `python -m gpusim.tools NAME ARGS...` runs one of them.

Every tool reads and writes the node state in $GPUSIM_NODE_DIR (default /var/lib/gpusim) and
prints the real tool's output format for the node's GPU generation and driver branch.
"""

from __future__ import annotations

import importlib
import sys

# tool name -> "module:function" (function(argv) -> exit code)
TOOLS = {
    "nvidia-smi": "nvsmi:main",
    "nv-fabricmanager": "services:fabricmanager_main",
    "systemctl": "services:systemctl_main",
    "shutdown": "services:shutdown_main",
    "reboot": "services:reboot_main",
    "poweroff": "services:poweroff_main",
    "dcgmi": "dcgm:main",
    "all_reduce_perf": "bench:nccl_main",
    "gpu_burn": "bench:burn_main",
    "mlxfwmanager": "mlx:fwmanager_main",
    "mlxfwreset": "mlx:fwreset_main",
    "flint": "mlx:flint_main",
    "mstflint": "mlx:flint_main",
    "modprobe": "kmod:modprobe_main",
    "rmmod": "kmod:rmmod_main",
    "lsmod": "kmod:lsmod_main",
    "nvidia-uninstall": "kmod:uninstall_main",
    "dmesg": "kmod:dmesg_main",
    "modinfo": "kmod:modinfo_main",
    "apt-get": "packages:apt_get_main",
    "apt-mark": "packages:apt_mark_main",
    "dpkg-query": "packages:dpkg_query_main",
    "gpusim-run-installer": "installer:main",
    "nvidia-imex": "imex:imex_main",
    "nvidia-imex-ctl": "imex:imex_ctl_main",
    # The software stack (issue 24): each answers "command not found" (127) unless the node state has its part of `stack`.
    "ofed_info": "stack:ofed_info_main",
    "ibstat": "stack:ibstat_main",
    "mokutil": "stack:mokutil_main",
    "dkms": "stack:dkms_main",
    "nv-hostengine": "stack:hostengine_main",
    # OFED's installer (behind a bundle's mlnxofedinstall script) and openibd (tools/ofed.py): 127 without stack.ofed.
    "gpusim-mlnxofedinstall": "ofed:installer_main",
    "openibd": "ofed:openibd_main",
}
# Installed only on a node whose GPUs are multi-node NVLink trays (GB200 / GB300 NVL72): elsewhere they are absent.
MNNVL_TOOLS = ("nvidia-imex", "nvidia-imex-ctl")
TOOL_NAMES = tuple(TOOLS)


def run(name: str, argv: list[str]) -> int:
    from ._common import ToolExit

    if name not in TOOLS:
        sys.stderr.write(f"gpusim.tools: unknown tool {name!r}\n")
        return 127
    mod_name, func = TOOLS[name].split(":")
    mod = importlib.import_module(f"{__name__}.{mod_name}")
    try:
        rc = getattr(mod, func)(list(argv))
    except ToolExit as exc:
        rc = exc.code
    except BrokenPipeError:
        rc = 141
    sys.stdout.flush()
    return int(rc or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write("usage: python -m gpusim.tools NAME [ARGS...]\n")
        return 2
    return run(argv[0].rsplit("/", 1)[-1], argv[1:])
