#!/usr/bin/env python3
"""Are the controller-side checks linear in the fleet? Prints the time at N and 4N and their ratio; asserts nothing.

Each case is one finding of the bad-input issue (issue 21, "Linear in the fleet"): a linear one stays near 4 for 4x
the input (more for small inputs where fixed costs dominate); a quadratic one nears 16.

- slurm_capacity's option checks (``check_params``): a pool of N nodes, half of them admitted;
- wave_plan with ``waves: [1]`` and domains of two nodes (one node per wave: N waves over N/2 buckets);
- the URLs in free text (``sub_urls``, what rollout_report and the download messages redact) over a hex dump of
  N x 100 characters, and the pattern it replaced over N characters, for comparison.

    .venv/bin/python bench/bench_linear.py [N]      (default 2,500: 10,000 at 4N)
"""

from __future__ import annotations

import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))  # the collection as ansible_collections.gpufleet.lifecycle (make venv)

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._artifact import sub_urls  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.capacity import check_params  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan import plan_waves  # noqa: E402

OLD_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def capacity(n):
    pool = [f"gpu-{i:05d}" for i in range(n)]
    params = {"pool": pool, "admit": pool[: n // 2], "max_unavailable": n, "owner_tag": "gpufleet", "wait_timeout": 60, "poll_interval": 1}
    return lambda: check_params(dict(params))


def waves_of_one(n):
    hosts = [f"gpu-{i:05d}" for i in range(n)]
    hostvars = {h: {"rack": f"r{i // 2}"} for i, h in enumerate(hosts)}
    return lambda: plan_waves(hosts, hostvars, waves=[1], spread_by=["rack"], max_per_domain=1)


def urls(n):
    text = "deadbeefcafe" * (n * 100 // 12) + " see https://user:pw@host/x?sig=1"
    return lambda: sub_urls(text, lambda url: "<url>")


def old_urls(n):
    # A hundredth of the text: the old pattern is quadratic, and at the full size it would take minutes.
    text = "deadbeefcafe" * (n // 12) + " see https://user:pw@host/x?sig=1"
    return lambda: OLD_URL.sub("<url>", text)


def best_of(run, repeat=3):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 2500
    cases = [("slurm_capacity check_params", capacity), ("wave_plan waves [1], racks of 2", waves_of_one),
             ("sub_urls over a hex dump", urls), ("(the old URL pattern, 1/100 of the text)", old_urls)]
    print(f"{'case':42} {'N=' + str(n):>12} {'4N=' + str(4 * n):>12} {'ratio':>7}")
    for label, make in cases:
        small, large = best_of(make(n)), best_of(make(4 * n))
        print(f"{label:42} {small:11.4f}s {large:11.4f}s {large / small if small else float('nan'):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
