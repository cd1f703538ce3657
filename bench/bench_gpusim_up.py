"""Time `gpusim up` and `gpusim down` for fleets of several sizes; print the figures.

Needs root and tests/gpusim/install-deps.sh. Usage:
    .venv/bin/python bench/bench_gpusim_up.py [--sizes 8 64] [--ping] [--audit] [--reboot]
Each size gets its own temporary workdir and a generated spec (one HGX H100 SKU, 1 job on every
8th node) on 127.0.50.x, Slurm ports from 18000, so it does not collide with the shipped specs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
sys.path.insert(0, str(TESTS))

from gpusim import node as gnode  # noqa: E402


def spec(size: int) -> dict:
    return {
        "fleet": {"name": f"bench-{size}", "loopback": 50, "slurm_port": 18000},
        "timing": {"reboot": 1},
        "skus": {"hgx_h100": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True, "cpus": 8,
                              "nics": [{"type": "ConnectX-7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax",
                                        "fw": "28.43.1014", "count": 8}],
                              "bom": {"driver": {"version": "570.124.06"}, "fabricmanager": "570.124.06",
                                      "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 8}, "nic_firmware": {"MT_0000000834": "28.43.1014"}}}},
        "nodes": [{"count": size, "prefix": "bench-", "width": 3, "sku": "hgx_h100", "driver": "570.124.06"}],
    }


def run(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed, done


def rss_mib(workdir: pathlib.Path) -> float:
    table = gnode.namespace_table()
    total = 0
    for nd in (workdir / "nodes").iterdir():
        for pid in gnode.processes(nd, table):
            try:
                fields = pathlib.Path(f"/proc/{pid}/statm").read_text().split()
            except OSError:
                continue
            total += int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    return total / 2**20


def bench(size: int, *, ping: bool, reboot: bool, audit: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    gpusim = [sys.executable, "-m", "gpusim"]
    with tempfile.TemporaryDirectory(prefix="gpusim-bench-") as tmp:
        spec_file = pathlib.Path(tmp) / "spec.yml"
        spec_file.write_text(yaml.safe_dump(spec(size)))
        workdir = pathlib.Path(tmp) / "fleet"
        result = {"nodes": size}
        result["up_s"], _ = run([*gpusim, "up", "--spec", str(spec_file), "--workdir", str(workdir)], env=env)
        try:
            result["node_rss_mib"] = round(rss_mib(workdir), 1)
            ansible_env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
                               ANSIBLE_PIPELINING="True")
            inventory = str(workdir / "inventory" / "hosts.yml")
            if ping:
                result["ansible_ping_s"], _ = run([str(REPO / ".venv/bin/ansible"), "gpu_nodes", "-i", inventory, "-m", "ping", "-f", "32"],
                                                  env=ansible_env)
            if audit:
                result["audit_playbook_s"], _ = run(
                    [str(REPO / ".venv/bin/ansible-playbook"), "-i", inventory, str(REPO / "playbooks" / "audit.yml"), "-f", "32",
                     "-e", f"gpufleet_report_dir={tmp}/report"], env=ansible_env)
                report = json.loads((pathlib.Path(tmp) / "report" / "fleet-report.json").read_text())
                result["audit_ok_nodes"] = report["totals"]["ok"]
            if reboot:
                result["ansible_reboot_all_s"], _ = run(
                    [str(REPO / ".venv/bin/ansible"), "gpu_nodes", "-i", inventory, "-m", "ansible.builtin.reboot", "-f", "32"], env=ansible_env)
        finally:
            result["down_s"], _ = run([*gpusim, "down", "--workdir", str(workdir)], env=env)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--ping", action="store_true", help="also time `ansible all -m ping` (32 forks)")
    parser.add_argument("--audit", action="store_true", help="also time playbooks/audit.yml (32 forks)")
    parser.add_argument("--reboot", action="store_true", help="also time `ansible all -m ansible.builtin.reboot` (32 forks)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_gpusim_up.py needs root")
    print(f"machine: {os.cpu_count()} CPUs")
    for size in args.sizes:
        print(json.dumps(bench(size, ping=args.ping, reboot=args.reboot, audit=args.audit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
