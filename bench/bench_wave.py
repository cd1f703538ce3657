"""Wave efficiency of the rollout: the slowest node's own phase time over the wave's measured time, with and without async.

Needs root and tests/gpusim/install-deps.sh. Usage:
    .venv/bin/python bench/bench_wave.py [--nodes 65 (default: 4)] [--forks 16] [--async-modes true false]
For each mode: a fresh simulated fleet of NODES PCIe L40S nodes on driver 570.124.06 (127.0.120.x, slurmctld on 16300;
the bench_audit.py addresses: run one bench at a time) and playbooks/upgrade.yml to the BOM's 580.95.05: the one canary
the rollout needs (gpufleet_canary_count must be at least 1), then every other node as one wave (gpufleet_waves ["100%"],
gpufleet_max_unavailable "100%"), the soak and the wave pause 1 s, phase durations scaled
(gpusim timing: a reboot 2 s, a flash 1 s, a diag 0.5 s), with the roles' long steps async (nvidia_driver_async,
gpu_firmware_async, nic_firmware_async, gpu_validate_async true, their default) or not.
From the state file of each node of that wave (rollout.phases: name, start, end; the wave from the rollout report;
preflight left out, it runs for every target before the canary): a node's own time is the sum of its phases'
durations; the ideal wave is the slowest node's own time; the measured wave runs from the first phase's start to the
last phase's end over the wave's nodes. The time between a node's phases is the controller's: its tasks between them.
Prints both, their ratio (the efficiency: 1.0 means no node waited for the controller), and the playbook's wall time.
Also the canary's own time (the same work on one node alone, in the same run) and the wave's time over it: how much
longer a wave of NODES-1 takes than one node, which includes the waits for forks inside the phases that the efficiency
counts as the nodes' own time (and, on this simulator, the nodes' own work on the controller's cores).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "integration"), str(REPO / "tests")]

from fleet import fleet_up  # noqa: E402
from rollout_helpers import NEW, OLD, RolloutFleet, report_json, waves_of, write_runfiles  # noqa: E402

LOOPBACK = 120
SLURM_PORT = 16300
ASYNC_VARIABLES = ("nvidia_driver_async", "gpu_firmware_async", "nic_firmware_async", "gpu_validate_async")


def spec(nodes: int) -> dict:
    return {
        "fleet": {"name": f"bench-wave-{nodes}", "loopback": LOOPBACK, "slurm_port": SLURM_PORT},
        "timing": {"reboot": 2, "flash": 1, "diag": 0.5, "burn": 0.5, "nccl": 0.5},
        "skus": {"l40s_pcie": {"gpu_model": "NVIDIA L40S", "gpu_count": 2, "nvswitch": False, "cpus": 2,
                               "nics": [{"type": "ConnectX-6 Dx", "psid": "MT_0000000359", "part_number": "MCX623106AN-CDA_Ax",
                                         "fw": "22.43.1014", "count": 1}],
                               "bom": {"driver": {"version": NEW, "install": "runfile", "kernel_module": "open"},
                                       "gpu": {"model": "NVIDIA L40S", "count": 2}, "cuda": ["12.4"]}}},
        "nodes": [{"count": nodes, "prefix": "wave-", "width": 3, "sku": "l40s_pcie", "driver": OLD, "kernel_module": "open"}],
    }


# Phases before the wave: every target's preflight runs in play 1, before the canary.
BEFORE_THE_WAVE = ("preflight",)


def efficiency(fleet: RolloutFleet, names: list[str], only: set[str] | None = None) -> dict:
    """The wave's figures over names; with only, just the phases of those names (the canary's, without its soak)."""
    own, starts, ends, unfinished, phases_of = {}, [], [], [], {}
    for name in names:
        phases = [p for p in fleet.phases(name) if p.get("name") not in BEFORE_THE_WAVE and (only is None or p.get("name") in only)
                  and isinstance(p.get("start"), (int, float)) and isinstance(p.get("end"), (int, float))]
        if not phases:
            unfinished.append(name)
            continue
        own[name] = sum(p["end"] - p["start"] for p in phases)
        starts.append(min(p["start"] for p in phases))
        ends.append(max(p["end"] for p in phases))
        phases_of[name] = {p["name"]: round(p["end"] - p["start"], 1) for p in phases}
    if unfinished:
        raise SystemExit(f"no finished phase in the state files of {', '.join(unfinished)}")
    slowest = max(own, key=own.get)
    wave_s = max(ends) - min(starts)
    return {"ideal_s": own[slowest], "slowest_node": slowest, "median_node_s": sorted(own.values())[len(own) // 2],
            "wave_s": wave_s, "efficiency": own[slowest] / wave_s, "slowest_node_phases_s": phases_of[slowest]}


def bench(nodes: int, forks: int, use_async: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-wave-") as tmp:
        tmp_path = pathlib.Path(tmp)
        (tmp_path / "spec.yml").write_text(yaml.safe_dump(spec(nodes)))
        runfiles = write_runfiles(tmp_path / "runfiles")
        with fleet_up(tmp_path / "spec.yml", tmp_path / "fleet", timeout=600) as workdir:
            fleet = RolloutFleet(workdir, runfiles)
            started = time.monotonic()
            done = fleet.upgrade(tmp_path / "report", timeout=3600, forks=forks, gpufleet_canary_count=1, gpufleet_waves=["100%"],
                                 gpufleet_max_unavailable="100%", gpufleet_failure_budget=nodes,
                                 **{variable: use_async for variable in ASYNC_VARIABLES})
            wall = time.monotonic() - started
            if done.returncode != 0:
                raise SystemExit(f"upgrade.yml failed ({done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}")
            upgraded = sum(1 for name in fleet.names if fleet.driver(name) == NEW)
            if upgraded != nodes:
                # A run that upgraded fewer nodes (every drain timed out, say) is no figure of a wave's efficiency.
                raise SystemExit(f"upgrade.yml upgraded {upgraded} of {nodes} nodes:\n{done.stdout[-6000:]}")
            waves = waves_of(report_json(tmp_path / "report"))
            last = max(waves)
            result = {"nodes": nodes, "forks": forks, "async": use_async, "upgraded": upgraded, "playbook_s": wall,
                      "waves": {str(k): len(v) for k, v in sorted(waves.items())}, "measured_wave": last, "wave_nodes": len(waves[last]),
                      **efficiency(fleet, waves[last])}
            # The canary is the same SKU doing the same work alone (a batch of one, nothing else running): its own time
            # is what one node costs without waiting for a fork or a core. The wave's time over it says what the
            # wave's size costs (forks and, here, the nodes' own work on the controller's cores); the efficiency above
            # counts a wait for a fork inside a phase as the node's own time, so it sees only the gaps between phases.
            # The canary's soak is left out: a wait only canaries do, not work a wave node does.
            canary = efficiency(fleet, waves[0], only=set(result["slowest_node_phases_s"])) if last != 0 and waves.get(0) else None
            if canary:
                result.update(canary_s=canary["ideal_s"], canary_phases_s=canary["slowest_node_phases_s"],
                              wave_over_canary=result["wave_s"] / canary["ideal_s"])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # A few minutes by default (make bench); the figure is --nodes 65 (a canary and a wave of 64).
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--forks", type=int, default=16)
    parser.add_argument("--async-modes", nargs="+", choices=["true", "false"], default=["true", "false"])
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_wave.py needs root (gpusim): not run")
        return 0
    if shutil.which("slurmctld") is None:
        print("bench_wave.py needs tests/gpusim/install-deps.sh (no slurmctld): not run")
        return 0
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    for mode in args.async_modes:
        print(json.dumps(bench(args.nodes, args.forks, mode == "true")), flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
