"""How close a rollout came to the sliding-window ideal: its makespan over the ideal's, for nodes whose jobs end at different times.

The ideal (plugins/module_utils/_rollout/ideal.py): each node's measured service time - its own work once its jobs
ended (firmware, driver, activation, validation, resume, rollback: the ``work_s`` of its recorded phases) -
list-scheduled on SLOTS slots from the time its last job ended (the window's start for an idle node), nodes taken in
order of that time. 1.0 means no slot stood free while a ready node waited and the controller added nothing; the issue's
goal is at most 1.25.

From a rollout's evidence (no fleet needed):
    .venv/bin/python bench/bench_window_ratio.py --evidence REPORT_DIR [--samples SAMPLES.jsonl] [--slots 3] [--include-canary]
REPORT_DIR is what the rollout role's report writes (gpufleet_report_dir/<rollout id>: nodes/<node>.json, rollout-report.json).
SAMPLES.jsonl is Slurm's own view sampled during the run, one JSON line per node and sample, {"t", "node", "state", "reason"}
(what tests/integration/rollout_helpers.Sampler writes from `scontrol show node -o`; Slurm names equal to the inventory's).
With samples, a node is ready at the first sample after its last busy one (ALLOCATED, MIXED or COMPLETING) and the actual
makespan runs from the first sample that shows a measured node out of service to the first that shows the last one back;
without, a node whose drain took more than --job-threshold seconds is ready at its drain's end, any other at the window's
start, and the actual makespan runs from the first node's admission to the last node's last own step (the evidence only).
The canary (wave 0) is left out unless --include-canary: it goes first and alone, before the window opens, by design.
Only nodes whose own work is measured (upgraded, rolled back) count. The gates' pauses are in the actual, not in the
ideal: compare runs with one gate (gpufleet_waves ["100%"]) or subtract them.

A whole simulated rollout, opt-in (root and tests/gpusim/install-deps.sh; minutes; holds the integration lock):
    flock /tmp/gpufleet-integration.lock .venv/bin/python bench/bench_window_ratio.py --simulate [--nodes 12] [--slots 3]
        [--long-every 3] [--long-job 240]
starts a fleet of NODES PCIe L40S nodes and a canary (127.0.121.x, slurmctld on 16310: run one bench at a time), runs a
job of LONG_JOB seconds (default 240, the issue's; it must outlast the canary and its soak) on the first of every LONG_EVERY
wave nodes in plan order (the issue's shape: one long job among every three), rolls the fleet out with playbooks/upgrade.yml
(gpufleet_max_unavailable SLOTS, one gate), samples Slurm meanwhile, and prints the same figures from that run's evidence
and samples, with the long-job nodes whose job was over before the window opened (then give a longer --long-job).
Prints one JSON line: the ratio, the actual and the ideal makespans, the slots, and each node's ready time and service time.
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

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / ".collections"), str(REPO / "tests" / "integration"), str(REPO / "tests")]

import yaml  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.ideal import ratio, window_ideal, window_schedule  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.record import phase_times  # noqa: E402
from fleet import fleet_up  # noqa: E402
from rollout_helpers import NEW, OLD, RolloutFleet, read_samples, write_runfiles  # noqa: E402

MEASURED_RESULTS = ("upgraded", "rolled_back")
BUSY = ("ALLOCATED", "MIXED", "COMPLETING")
OWN_STEPS = ("nic_firmware", "gpu_firmware", "driver", "activate", "validate", "resume", "rollback")
# Slurm states that make a node unavailable (as gpufleet.lifecycle.slurm_capacity counts them).
UNAVAILABLE_WORDS = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE",
                     "POWERED_DOWN", "POWER_DOWN", "FUTURE", "UNKNOWN")
LOOPBACK, SLURM_PORT = 121, 16310


def read_records(report_dir: pathlib.Path) -> list[dict]:
    """The per-node records of a rollout's evidence: nodes/<node>.json, else the nodes of rollout-report.json."""
    files = sorted((report_dir / "nodes").glob("*.json"))
    if files:
        return [json.loads(path.read_text()) for path in files]
    report = report_dir / "rollout-report.json"
    if not report.is_file():
        raise SystemExit(f"{report_dir} holds neither nodes/*.json nor rollout-report.json: give the rollout's report folder")
    return json.loads(report.read_text())["nodes"]


def report_slots(report_dir: pathlib.Path) -> int | None:
    report = report_dir / "rollout-report.json"
    if not report.is_file():
        return None
    return json.loads(report.read_text()).get("summary", {}).get("unavailable_budget")


def measured_nodes(records: list[dict], include_canary: bool = False) -> dict[str, dict]:
    """{node: {service_s, start, jobs_s, drain_end, work_end}} of the records whose own work is measured."""
    out = {}
    for record in records:
        if record.get("result") not in MEASURED_RESULTS or (record.get("wave") == 0 and not include_canary):
            continue
        phases = [p for p in record.get("phases") or [] if isinstance(p.get("start"), (int, float))]
        times = phase_times(phases)
        if times["work_s"] is None or times["start"] is None:
            continue
        drains = [p["end"] for p in phases if p["name"] == "drain" and p.get("end") is not None]
        own = [p["end"] for p in phases if p["name"] in OWN_STEPS and p.get("end") is not None]
        out[record["node"]] = {"service_s": times["work_s"], "start": times["start"], "jobs_s": times["jobs_s"] or 0.0,
                               "drain_end": max(drains) if drains else times["start"], "work_end": max(own)}
    return out


def unavailable(state: str) -> bool:
    """Whether a node in this Slurm state (scontrol's State=, e.g. IDLE+DRAIN) is out of service."""
    return state.endswith("*") or any(word in state for word in UNAVAILABLE_WORDS)


def busy(state: str) -> bool:
    """Whether a node in this Slurm state runs a job (ALLOCATED+DRAIN: its drain waits for it)."""
    return any(word in state.rstrip("*").split("+") for word in BUSY)


def from_samples(nodes: dict[str, dict], samples: list[dict]) -> tuple[dict[str, float], float, float]:
    """(ready times, window start, window end) from Slurm's samples (see the module's docstring)."""
    by_node: dict[str, list[tuple[float, str]]] = {}
    for s in samples:
        if s.get("node") in nodes:
            by_node.setdefault(s["node"], []).append((float(s["t"]), s.get("state") or ""))
    missing = sorted(set(nodes) - set(by_node))
    if missing:
        raise SystemExit(f"the samples show nothing of {', '.join(missing)}: give the samples of this rollout (Slurm names as the inventory's)")
    firsts, backs, lasts_out = [], [], {}
    for node, seen in by_node.items():
        seen.sort()
        out = [t for t, state in seen if unavailable(state)]
        if not out:
            raise SystemExit(f"the samples never show {node} out of service: sample more often than its service time")
        firsts.append(out[0])
        lasts_out[node] = out[-1]
        back = [t for t, state in seen if t > out[-1] and not unavailable(state)]
        backs.append(back[0] if back else out[-1])
    start, end = min(firsts), max(backs)
    ready = {}
    for node, seen in by_node.items():
        busy_at = [i for i, (t, state) in enumerate(seen) if busy(state) and t <= lasts_out[node]]
        if not busy_at:
            ready[node] = start
            continue
        after = busy_at[-1] + 1
        ready[node] = max(start, seen[after][0] if after < len(seen) else seen[busy_at[-1]][0])
    return ready, start, end


def from_evidence(nodes: dict[str, dict], job_threshold: float) -> tuple[dict[str, float], float, float]:
    """(ready times, window start, window end) from the records alone (see the module's docstring)."""
    start = min(n["start"] for n in nodes.values())
    end = max(n["work_end"] for n in nodes.values())
    ready = {name: n["drain_end"] if n["jobs_s"] > job_threshold else start for name, n in nodes.items()}
    return ready, start, end


def figures(records: list[dict], slots: int, samples: list[dict] | None = None, include_canary: bool = False,
            job_threshold: float = 5.0) -> dict:
    """The ratio and what it comes from."""
    nodes = measured_nodes(records, include_canary)
    if not nodes:
        raise SystemExit("no record has a measured service time (an upgraded or rolled-back node with closed phases)")
    if samples:
        ready, start, end = from_samples(nodes, samples)
    else:
        ready, start, end = from_evidence(nodes, job_threshold)
    service = {name: n["service_s"] for name, n in sorted(nodes.items())}
    ideal = window_ideal(service, ready, slots, start=start)
    schedule = window_schedule(service, ready, slots, start=start)
    actual = end - start
    return {
        "ratio": round(ratio(actual, ideal), 3), "actual_s": round(actual, 1), "ideal_s": round(ideal, 1), "slots": slots,
        "window_start": round(start, 1),
        "nodes": len(nodes), "ready_from": "slurm samples" if samples else f"drain ends (drains over {job_threshold:g} s)",
        "mean_service_s": round(sum(service.values()) / len(service), 1),
        "per_node": {name: {"ready_s": round(ready[name] - start, 1), "service_s": round(service[name], 1),
                            "ideal_start_s": round(schedule[name][0] - start, 1)} for name in service},
    }


def simulate(nodes: int, slots: int, long_every: int, long_job: float) -> dict:
    """A whole simulated rollout of the issue's shape, opt-in (see the module's docstring)."""
    spec = {
        "fleet": {"name": f"bench-window-{nodes}", "loopback": LOOPBACK, "slurm_port": SLURM_PORT},
        "timing": {"reboot": 2, "flash": 1, "diag": 0.5, "burn": 0.5, "nccl": 0.5},
        "skus": {"l40s_pcie": {"gpu_model": "NVIDIA L40S", "gpu_count": 2, "nvswitch": False, "cpus": 2,
                               "nics": [{"type": "ConnectX-6 Dx", "psid": "MT_0000000359", "part_number": "MCX623106AN-CDA_Ax",
                                         "fw": "22.43.1014", "count": 1}],
                               "bom": {"driver": {"version": NEW, "install": "runfile", "kernel_module": "open"},
                                       "gpu": {"model": "NVIDIA L40S", "count": 2}, "cuda": ["12.4"]}}},
        "nodes": [{"count": nodes + 1, "prefix": "win-", "width": 2, "sku": "l40s_pcie", "driver": OLD, "kernel_module": "open"}],
    }
    with tempfile.TemporaryDirectory(prefix="bench-window-") as tmp:
        tmp_path = pathlib.Path(tmp)
        (tmp_path / "spec.yml").write_text(yaml.safe_dump(spec))
        runfiles = write_runfiles(tmp_path / "runfiles")
        with fleet_up(tmp_path / "spec.yml", tmp_path / "fleet", timeout=600) as workdir:
            fleet = RolloutFleet(workdir, runfiles)
            canary, wave = fleet.names[0], fleet.names[1:]
            long_nodes = [name for index, name in enumerate(wave) if index % long_every == 0]
            jobs_started = time.time()
            fleet.wait_jobs_running([fleet.submit(name, long_job) for name in long_nodes])
            sampler = fleet.sampler(tmp_path / "samples.jsonl")
            done = fleet.upgrade(tmp_path / "report", timeout=3600, gpufleet_canary_count=1, gpufleet_waves=["100%"],
                                 gpufleet_max_unavailable=slots, gpufleet_failure_budget=0,
                                 gpufleet_drain_timeout=int(long_job) + 300, gpufleet_capacity_wait_seconds=int(long_job) * 4 + 600)
            sampler.stop()
            if done.returncode != 0:
                raise SystemExit(f"upgrade.yml failed ({done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}")
            report_dir = next((tmp_path / "report").glob("**/rollout-report.json")).parent
            result = figures(read_records(report_dir), slots, read_samples(tmp_path / "samples.jsonl"))
            # The jobs start before the rollout: one that ended before the window opened (after the canary and its soak)
            # leaves its node idle, and the run says nothing of jobs ending at different times. Give a longer --long-job then.
            opened = result["window_start"] - jobs_started
            result.update(simulated={"nodes": nodes, "canary": canary, "long_jobs_on": long_nodes, "long_job_s": long_job,
                                     "window_opened_after_jobs_started_s": round(opened, 1),
                                     "long_jobs_over_before_the_window": [n for n in long_nodes if result["per_node"][n]["ready_s"] == 0]})
            return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidence", type=pathlib.Path, help="a rollout's report folder (nodes/<node>.json, rollout-report.json)")
    parser.add_argument("--samples", type=pathlib.Path, help="Slurm's node states sampled during the run (JSON lines)")
    parser.add_argument("--slots", type=int, help="the budget (default: the report's unavailable_budget; 3 with --simulate)")
    parser.add_argument("--include-canary", action="store_true", help="count the canary's nodes too")
    parser.add_argument("--job-threshold", type=float, default=5.0, help="without samples: a drain longer than this waited for a job")
    parser.add_argument("--simulate", action="store_true", help="run a whole simulated rollout first (root, gpusim; minutes)")
    parser.add_argument("--nodes", type=int, default=12, help="with --simulate: wave nodes (a canary is added)")
    parser.add_argument("--long-every", type=int, default=3, help="with --simulate: a long job on the first of every N wave nodes")
    parser.add_argument("--long-job", type=float, default=240.0,
                        help="with --simulate: the long job's seconds (it must outlast the canary and its soak, a minute or two)")
    args = parser.parse_args()
    if args.simulate:
        if os.geteuid() != 0 or shutil.which("slurmctld") is None:
            print("bench_window_ratio.py --simulate needs root and tests/gpusim/install-deps.sh: not run")
            return 0
        print(json.dumps(simulate(args.nodes, args.slots or 3, args.long_every, args.long_job)))
        return 0
    if args.evidence is None:
        # make bench runs every bench without arguments: this one needs a rollout's evidence, or --simulate.
        print("bench_window_ratio.py needs --evidence REPORT_DIR (a rollout's report) or --simulate: not run")
        return 0
    slots = args.slots or report_slots(args.evidence)
    if not slots:
        raise SystemExit("the report gives no unavailable_budget: pass --slots (gpufleet_max_unavailable as a count)")
    samples = [json.loads(line) for line in args.samples.read_text().splitlines() if line.strip()] if args.samples else None
    print(json.dumps(figures(read_records(args.evidence), slots, samples, args.include_canary, args.job_threshold)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
