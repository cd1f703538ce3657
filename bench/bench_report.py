"""Figures for the fleet audit report with firmware read in band and out of band.

    .venv/bin/python bench/bench_report.py

Prints the time and peak memory of building and rendering the report for 1,000 and 10,000 HGX nodes, each with a
BMC firmware inventory of 18 members (HMC, ERoT, FPGA, CPLD, PCIe switch, 4 NVSwitches, 8 GPUs, host BMC, BIOS)
and a BOM that compares the bundle, NVSwitch, BMC and BIOS firmware, VBIOS and GSP firmware; one node in ten
runs an old bundle, one in twenty has no BMC credentials, and the BMC passwords are passed as secrets.
The ratio of the two times says whether it stays linear (about 10).
"""

from __future__ import annotations

import pathlib
import sys
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import conftest  # noqa: E402,F401,I001  (makes ansible_collections.gpufleet.lifecycle importable)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import build_report, render_html, render_json, render_markdown  # noqa: E402

BOM = {
    "driver": {"version": "570.133.20"},
    "gpu": {"count": 8, "model": "NVIDIA B200", "vbios": "97.00.7D.00.0F", "gsp_firmware": "570.133.20"},
    "gpu_firmware": {"version": "HGX-B200-24.12-1"},
    "nvswitch_firmware": "96.10.6D.00.01",
    "bmc_firmware": "24.09-1",
    "bios": "1.3.2",
}


def inventory(bundle):
    entries = [{"Id": "HGX_FW_BMC_0", "Version": bundle}]
    entries += [{"Id": cid, "Version": "1.0"} for cid in ("HGX_FW_ERoT_BMC_0", "HGX_FW_FPGA_0", "HGX_FW_CPLD_0", "HGX_FW_PCIeSwitch_0")]
    entries += [{"Id": f"HGX_FW_NVSwitch_{i}", "Version": "96.10.6D.00.01"} for i in range(4)]
    entries += [{"Id": f"HGX_FW_GPU_SXM_{i + 1}", "Version": "97.00.7D.00.0F"} for i in range(8)]
    entries += [{"Id": "HostBMC_0", "Version": "24.09-1"}, {"Id": "HostBIOS_0", "Version": "1.3.2"}]
    return {"entries": entries}


def records(count):
    gpus = [{"name": "NVIDIA B200", "vbios_version": "97.00.7D.00.0F", "gsp_firmware_version": "570.133.20"} for _ in range(8)]
    out = []
    for i in range(count):
        record = {
            "name": f"b200-{i:05d}",
            "sku": "hgx_b200",
            "bom": BOM,
            "facts": {"driver": {"version": "570.133.20", "installed": True, "loaded": True}, "nvidia_smi": "ok", "gpu_count": 8, "gpus": gpus},
        }
        if i % 20:
            record["bmc"] = inventory("HGX-B200-24.08-2" if i % 10 == 1 else "HGX-B200-24.12-1")
        out.append(record)
    return out


def main():
    times = {}
    for count in (1000, 10000):
        nodes = records(count)

        def run(nodes=nodes):
            report = build_report(nodes, [r["name"] for r in nodes], secrets=["bmc-password-1", "bmc-password-2"])
            return report, {fmt: len(render(report)) for fmt, render in (("json", render_json), ("md", render_markdown), ("html", render_html))}

        start = time.perf_counter()
        report, sizes = run()
        times[count] = time.perf_counter() - start
        tracemalloc.start()  # a second run for the memory: tracemalloc slows Python several times
        run()
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        t = report["totals"]
        print(
            f"audit report with firmware, {count} nodes: {times[count]:.2f} s, peak memory {peak / 2**20:.0f} MiB, "
            + ", ".join(f"{fmt} {size / 2**20:.1f} MiB" for fmt, size in sizes.items())
            + f"; ok {t['ok']}, drift {t['drift']}, unknown {t['unknown']}"
        )
    print(f"10,000 / 1,000 nodes time ratio: {times[10000] / times[1000]:.1f} (linear: about 10)")


if __name__ == "__main__":
    main()
