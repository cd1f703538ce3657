"""Figures for fleet-wide fact gathering and reporting.

    .venv/bin/python bench/bench_facts.py

Prints: nvidia-smi XML parse time for an 8-GPU node, the cost of one gpu_facts
collection (time in Python and processes started), and the time and peak
memory of building and rendering the audit report for 10,000 nodes.
"""

from __future__ import annotations

import pathlib
import sys
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import conftest  # noqa: E402,F401,I001  (makes ansible_collections.gpufleet.lifecycle importable)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import gather as _gpu_facts  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvsmi  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import build_report, render_html, render_json, render_markdown  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "gpu_facts"


def eight_gpu_xml():
    """The 2-GPU fixture widened to 8 GPUs (same element layout)."""
    text = (FIXTURES / "nvsmi_qx_2xH100_550.90.07.xml").read_text()
    head, rest = text.split("\t<gpu ", 1)
    body = "\t<gpu " + rest.rsplit("</nvidia_smi_log>", 1)[0]
    return head.replace("<attached_gpus>2<", "<attached_gpus>8<") + body * 4 + "</nvidia_smi_log>\n"


def timeit(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class FakeModule:
    """Answers like a healthy HGX node; counts processes."""

    def __init__(self, xml, latency=None):
        self.latency = latency or {}
        self.xml = xml
        self.outputs = {
            "nvidia-smi": xml,
            "nv-fabricmanager": "Fabric Manager version is : 550.90.07\n",
            "systemctl": "active\nactive\n",
            "dmesg": "[ 3721.338101] NVRM: Xid (PCI:0000:2a:00): 79, pid=41234, name=python3, GPU has fallen off the bus.\n",
            "mlxfwmanager": (FIXTURES / "mlxfwmanager_query_2xCX7.xml").read_text(),
        }

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return "/usr/bin/" + name if name in self.outputs or name == "timeout" else None

    def run_command(self, cmd, **kwargs):
        tool = cmd[3].rsplit("/", 1)[1]  # after `timeout --kill-after=10 N`
        time.sleep(self.latency.get(tool, 0))
        return 0, self.outputs[tool], ""


# Seconds each read takes on a real HGX node (order of magnitude: nvidia-smi -q -x walks every GPU through NVML).
REAL_NODE_LATENCY = {"nvidia-smi": 2.0, "mlxfwmanager": 1.5, "nv-fabricmanager": 0.05, "systemctl": 0.02, "dmesg": 0.05}


def synthetic_records(count):
    bom = {"driver": {"version": "550.90.07"}, "gpu": {"count": 8, "model": "NVIDIA H100 80GB HBM3"}}
    records = []
    for i in range(count):
        driver = "550.90.07" if i % 10 else "535.161.08"
        records.append(
            {
                "name": f"gpu-{i:05d}",
                "sku": f"sku-{i % 3}",
                "bom": bom,
                "facts": {
                    "driver": {"version": driver, "installed": True, "loaded": True},
                    "gpu_count": 8,
                    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "vbios_version": "96.00.74.00.0D"} for _ in range(8)],
                    "xid": {"critical": []},
                },
            }
        )
    return records


def main():
    xml = eight_gpu_xml()
    parse_s = timeit(lambda: nvsmi.parse_xml(xml), 50)
    print(f"nvidia-smi -q -x parse, 8 GPUs ({len(xml) // 1024} KiB): {parse_s * 1e3:.2f} ms")

    module = FakeModule(xml)
    collector = None

    def collect():
        nonlocal collector
        collector = _gpu_facts.GpuFactsCollector(module, host=_gpu_facts.Host("/nonexistent"))
        return collector.collect()

    collect_s = timeit(collect, 50)
    print(f"gpu_facts collection in Python (tools faked): {collect_s * 1e3:.2f} ms, processes started: {len(collector.counter)}")

    # The reads run at the same time: with real-node latencies the call costs its slowest read, not their sum.
    slow = FakeModule(xml, REAL_NODE_LATENCY)
    start = time.perf_counter()
    _gpu_facts.GpuFactsCollector(slow, host=_gpu_facts.Host("/nonexistent")).collect()
    slow_s = time.perf_counter() - start
    print(
        f"gpu_facts with real-node tool latencies {REAL_NODE_LATENCY}: {slow_s:.2f} s "
        f"(one after another: {sum(REAL_NODE_LATENCY.values()):.2f} s; slowest read: {max(REAL_NODE_LATENCY.values()):.2f} s)"
    )

    for count in (1000, 10000):
        records = synthetic_records(count)
        tracemalloc.start()
        start = time.perf_counter()
        report = build_report(records, [r["name"] for r in records])
        sizes = {fmt: len(render(report)) for fmt, render in (("json", render_json), ("md", render_markdown), ("html", render_html))}
        elapsed = time.perf_counter() - start
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"audit report, {count} nodes: {elapsed:.2f} s, peak memory {peak / 2**20:.0f} MiB, "
            + ", ".join(f"{fmt} {size / 2**20:.1f} MiB" for fmt, size in sizes.items())
        )


if __name__ == "__main__":
    main()
