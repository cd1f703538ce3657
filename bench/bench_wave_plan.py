"""How long the wave plan of a large inventory takes, and how much memory it needs (prints figures; asserts nothing).

A 10,000-node inventory with three spread_by variables (rack of 8 nodes, NVLink domain of 18, power
domain of 250) planned with the default waves, a budget of 10% and one node per domain per wave;
then the worst shape for the planner: one variable with only two values (waves of two nodes).
Run: .venv/bin/python bench/bench_wave_plan.py [NODES]
"""

from __future__ import annotations

import pathlib
import sys
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan import plan_waves  # noqa: E402


def inventory(count):
    hosts = [f"gpu-{i:05d}" for i in range(count)]
    hostvars = {h: {"rack": f"r{i // 8}", "nvlink_domain": f"nvl{i // 18}", "power": f"pdu{i // 250}"} for i, h in enumerate(hosts)}
    return hosts, hostvars


def measure(label, hosts, hostvars, **kwargs):
    # time without tracemalloc (it slows allocation-heavy code several times), memory in a second run
    started = time.perf_counter()
    plan = plan_waves(hosts, hostvars, **kwargs)
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    again = plan_waves(hosts, hostvars, **kwargs)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert again == plan, "the plan is not deterministic"
    sizes = plan["sizes"]
    print(f"{label}: {len(hosts)} hosts -> {len(sizes) - 1} waves (largest {max(sizes[1:] or [0])}), "
          f"{elapsed:.3f} s, peak {peak / 2**20:.1f} MiB (tracemalloc, second run)")


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    hosts, hostvars = inventory(count)
    measure("3 spread_by, 10% budget", hosts, hostvars, spread_by=["rack", "nvlink_domain", "power"], max_per_domain=1,
            max_unavailable="10%", waves=["10%", "25%", "100%"])
    measure("no spread, 10% budget", hosts, hostvars, max_unavailable="10%")
    two = {h: {"side": i % 2} for i, h in enumerate(hosts)}
    measure("1 spread_by of 2 values (waves of 2)", hosts, two, spread_by=["side"], waves=["100%"])


if __name__ == "__main__":
    main()
