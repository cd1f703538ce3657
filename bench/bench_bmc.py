"""Measure the simulated BMCs: bring-up time per node, memory, Redfish request rate, PLDM build/parse speed.

No root and no sshd needed: it writes node states for N nodes into a temporary workdir and starts the
fleet's BMC process (`python -m gpusim.bmc`, as `gpusim up` does) on 127.0.180.x:18443. Usage:
    .venv/bin/python bench/bench_bmc.py [--sizes 8 64 250]
Prints one line per size: time until every BMC listens, per node, the BMC process's RSS, the time of
a full FirmwareInventory walk of every BMC (what nvfwupd show_version does), and requests per second
with 16 clients; then PLDM package build and parse figures.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import pathlib
import ssl
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gpusim import artifacts, fleet, pldm, state  # noqa: E402
from gpusim.bmc import cert  # noqa: E402

PORT = 18443
USER, PASSWORD = "admin", "bench-password"
CTX = ssl._create_unverified_context()  # noqa: S323 - the bench's self-signed certificate
AUTH = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}


def address(i: int) -> str:
    return f"127.0.{180 + i // 250}.{1 + i % 250}"


def make_workdir(root: pathlib.Path, size: int) -> pathlib.Path:
    nodes = []
    for i in range(size):
        nd = root / "nodes" / f"b{i:03d}"
        spec = {"name": f"b{i:03d}", "sku": "hgx_h100", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
                "nvswitch": True, "driver": "570.124.06", "timing": {"flash": 0.5}}
        state.save(nd, state.new_node_state(spec))
        (nd / "power").write_text("up\n")
        nodes.append({"name": spec["name"], "node_dir": str(nd), "bmc_address": address(i)})
    (root / "fleet.json").write_text(json.dumps({"name": "bench", "bmc_port": PORT, "nodes": nodes}))
    bmc = root / "bmc"
    bmc.mkdir()
    (bmc / "credentials.json").write_text(json.dumps({"user": USER, "password": PASSWORD}))
    cert.make_self_signed(bmc / "cert.pem", bmc / "key.pem", [n["bmc_address"] for n in nodes], [], "bench")
    return root


def get(addr: str, path: str) -> dict:
    conn = http.client.HTTPSConnection(addr, PORT, context=CTX, timeout=30)
    try:
        conn.request("GET", path, headers=AUTH)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise SystemExit(f"GET https://{addr}{path}: {resp.status} {body[:200]!r}")
        return json.loads(body)
    finally:
        conn.close()


def inventory_walk(addr: str) -> int:
    members = get(addr, "/redfish/v1/UpdateService/FirmwareInventory")["Members"]
    for m in members:
        get(addr, m["@odata.id"])
    return 1 + len(members)


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_size(size: int) -> None:
    with tempfile.TemporaryDirectory(prefix=f"bench-bmc-{size}-") as tmp:
        workdir = make_workdir(pathlib.Path(tmp), size)
        started = time.monotonic()
        pid = fleet.start_bmcs(workdir, timeout=120)
        up_s = time.monotonic() - started
        try:
            idle = rss_mib(pid)
            t0 = time.monotonic()
            requests = sum(inventory_walk(address(i)) for i in range(size))
            walk_s = time.monotonic() - t0
            t0 = time.monotonic()
            with ThreadPoolExecutor(16) as pool:
                total = sum(pool.map(inventory_walk, [address(i) for i in range(size)]))
            par_s = time.monotonic() - t0
            busy = rss_mib(pid)
        finally:
            fleet._stop_pid(pid)
        print(f"{size:4d} BMCs: all listening in {up_s:.2f}s ({up_s / size * 1000:.1f} ms/node); RSS {idle:.0f} MiB idle, "
              f"{busy:.0f} MiB after load ({busy / size:.2f} MiB/node); inventory walk of every BMC {walk_s:.1f}s "
              f"({requests / walk_s:.0f} req/s, 1 client), {total / par_s:.0f} req/s with 16 clients")


def bench_pldm() -> None:
    comps = {"HMC": "HGX-24.04-2", "GPU_SXM": "96.00.AF.00.01", "NVSwitch": "96.10.70.00.01", "ERoT": "01.03.0300.0000_n04",
             "PCIeSwitch": "1.8.0A", "FPGA": "2.D1", "CPLD": "0.1D"}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        for i in range(50):
            path = artifacts.write_fwpkg(tmp, f"HGX-24.04-{i}", components=comps)
        build_ms = (time.monotonic() - t0) / 50 * 1000
        data = path.read_bytes()
    for n in (100, 200):
        big = pldm.build(pldm.Package("HGX-big", [pldm.Component("GPU_SXM", "96.00.AF.00.01", i, sku=f"{i:08x}",
                                                                 image=b"x" * 65536) for i in range(n)]))
        t0 = time.monotonic()
        for _ in range(10):
            pldm.parse(big)
        parse_ms = (time.monotonic() - t0) / 10 * 1000
        print(f"PLDM parse of {n} components ({len(big) / 2**20:.1f} MiB): {parse_ms:.1f} ms")
    print(f"PLDM build of a 7-component HGX package ({len(data)} bytes): {build_ms:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64])
    args = parser.parse_args()
    for size in args.sizes:
        bench_size(size)
    bench_pldm()
    return 0


if __name__ == "__main__":
    sys.exit(main())
