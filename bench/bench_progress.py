"""What the rollout's progress line costs the controller as the fleet grows (the rollout_progress filter).

Usage:
    .venv/bin/python bench/bench_progress.py [--nodes 100 1000 4000] [--repeat 3]
For each fleet size N: a real Ansible inventory of N hosts and a VariableManager whose facts are what a running rollout
holds per node (set as set_fact and register set them): its result, its Slurm name, and the node's rollout section (phases) as its last rollout_state task
returned it. A tenth of the nodes are done, a tenth in flight. The filter runs over Ansible's own HostVars, as
roles/rollout/tasks/admit.yml calls it (the plan's order, hostvars, slots, failure budget, the one waiting node).

Prints, per N: the time of one call (the best of --repeat), and that time multiplied by N. Each node's admission
shows one line, so the product is what one run of N nodes spends on the line alone: one call is linear in N, a run
quadratic. No simulated node is needed. Pure controller CPU, on one core.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / ".collections"))  # make venv links the collection there

from ansible_collections.gpufleet.lifecycle.plugins.filter.rollout_progress import rollout_progress  # noqa: E402


def fleet(n):
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[])
    inventory.add_group("gpu")
    names = [f"gpu-{i:05d}" for i in range(n)]
    for name in names:
        inventory.add_host(name, group="gpu")
    manager = VariableManager(loader=loader, inventory=inventory)
    now = time.time()
    for index, name in enumerate(names):
        if index < n // 10:
            result, phases = "upgraded", [{"name": p, "start": now - 600, "end": now - 500, "status": "ok"} for p in
                                          ("drain", "driver", "activate", "validate", "resume")]
        elif index < n // 5:
            result, phases = "not_started", [{"name": "drain", "start": now - 60, "end": now - 50, "status": "ok"},
                                             {"name": "driver", "start": now - 50, "end": None, "status": "started"}]
        else:
            result, phases = "not_started", [{"name": "preflight", "start": now - 900, "end": now - 900, "status": "ok"}]
        manager.set_nonpersistent_facts(name, {  # as set_fact and register keep them
            "rollout_result": result,
            "__rollout_slurm_name": name,
            "__rollout_phase_result": {"rollout": {"id": "r-bench", "heartbeat_at": now, "phases": phases}},
        })
    return names, HostVars(inventory=inventory, variable_manager=manager, loader=loader)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 4000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'nodes':>7} {'one line (s)':>13} {'a run of lines (s)':>19}  the line")
    for n in args.nodes:
        order, hostvars = fleet(n)
        best, line = None, ""
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = rollout_progress(order, hostvars, slots=max(1, n // 20), failure_budget=2, waiting={order[-1]: "asks for a slot"},
                                   rollout="r-bench")
            took = time.perf_counter() - start
            best = took if best is None else min(best, took)
            line = out["line"]
        print(f"{n:>7} {best:>13.4f} {best * n:>19.1f}  {line[:90]}")


if __name__ == "__main__":
    main()
