"""Preflight's compatibility checks over a large synthetic inventory: time and peak memory (prints figures; asserts nothing).

The preflight role checks each node's BOM with the gpufleet.lifecycle.bom_violations filter: once per host, with
that host's GPU names and its SKU's BOM and workload CUDA versions (roles/preflight/tasks/main.yml). This runs the
same filter, through the filter plugin's own wrapper, over 10,000 synthetic hosts of six SKUs (H100, H200, B200,
A100, L40S, with one SKU whose BOM is wrong so that violations are built too): once per host as the role does,
and once per SKU (what a planner that groups hosts by SKU would need).
Run: .venv/bin/python bench/bench_preflight.py [NODES]
"""

from __future__ import annotations

import pathlib
import sys
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.gpufleet.lifecycle.plugins.filter.compat import FilterModule  # noqa: E402

BOM_VIOLATIONS = FilterModule().filters()["bom_violations"]
TODAY = "2026-12-01"
SKUS = {
    "hgx_h100": {"gpu": "NVIDIA H100 80GB HBM3", "bom": {"driver": {"version": "570.124.06"}, "cuda": ["12.4", "12.8"]}},
    "hgx_h200": {"gpu": "NVIDIA H200", "bom": {"driver": {"version": "570.124.06"}, "cuda": ["12.8"]}},
    "hgx_b200": {"gpu": "NVIDIA B200", "bom": {"driver": {"version": "570.124.06"}, "cuda": ["12.8"]}},
    "dgx_a100": {"gpu": "NVIDIA A100-SXM4-80GB", "bom": {"driver": {"version": "550.90.07"}, "cuda": ["12.4"]}},
    "l40s": {"gpu": "NVIDIA L40S", "bom": {"driver": {"version": "550.90.07"}, "cuda": ["12.2", "12.4"]}},
    # A BOM that would fail preflight: the 535 branch cannot run CUDA 12.8.
    "hgx_h100_stale": {"gpu": "NVIDIA H100 80GB HBM3", "bom": {"driver": {"version": "535.161.08"}, "cuda": ["12.8"]}},
}


def inventory(count):
    names = list(SKUS)
    hostvars = {}
    for i in range(count):
        sku = names[i % len(names)]
        hostvars[f"gpu-{i:05d}"] = {"gpufleet_sku": sku, "gpufleet_bom": SKUS[sku]["bom"], "gpu_names": [SKUS[sku]["gpu"]] * 8}
    return hostvars


def per_host(hostvars):
    """As the role: each host's BOM against its own GPU names (unique, as the role's template makes them)."""
    failing = 0
    for host in hostvars.values():
        bom = host["gpufleet_bom"]
        if BOM_VIOLATIONS(bom, sorted(set(host["gpu_names"])), bom.get("cuda", []), today=TODAY):
            failing += 1
    return failing


def per_sku(hostvars):
    """Once per SKU: the GPU names of all its hosts together."""
    by_sku = {}
    for host in hostvars.values():
        by_sku.setdefault(host["gpufleet_sku"], (host["gpufleet_bom"], set()))[1].update(host["gpu_names"])
    return sum(1 for bom, names in by_sku.values() if BOM_VIOLATIONS(bom, sorted(names), bom.get("cuda", []), today=TODAY))


def measure(label, function, hostvars):
    # time without tracemalloc (it slows allocation-heavy code), memory in a second run
    started = time.perf_counter()
    result = function(hostvars)
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    again = function(hostvars)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert again == result, "the checks are not deterministic"
    print(f"{label}: {len(hostvars)} hosts, {result} failing, {elapsed:.3f} s ({elapsed / len(hostvars) * 1e6:.0f} us per host), "
          f"peak {peak / 2**20:.1f} MiB (tracemalloc, second run)")


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    tracemalloc.start()
    hostvars = inventory(count)
    _current, inventory_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"synthetic inventory: {count} hosts, {len(SKUS)} SKUs, {inventory_peak / 2**20:.1f} MiB")
    measure("bom_violations per host (as the preflight role)", per_host, hostvars)
    measure("bom_violations per SKU", per_sku, hostvars)


if __name__ == "__main__":
    main()
