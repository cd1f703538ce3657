"""Mitogen for Ansible against Ansible's own linear strategy: the audit and a small rollout, speed-up printed.

Needs root, tests/gpusim/install-deps.sh and Mitogen (`pip install mitogen`; 0.3.54 supports ansible-core 2.19; without
it this prints so and exits). Usage:
    .venv/bin/python bench/bench_mitogen.py [--nodes 16 (default: 8)] [--forks 32] [--rollout]
Audit: a fleet of the bench_audit.py shape (127.0.120.x, slurmctld on 16300: run one bench at a time), `ansible -m ping`
and playbooks/audit.yml under strategy linear (the fleet's ansible.cfg: pipelining on) and mitogen_linear.
--rollout: also playbooks/upgrade.yml over a fresh bench_wave.py fleet (a canary and one wave) under each strategy.
Prints wall seconds, the controller's CPU seconds (as bench_audit.py counts them) and linear / mitogen for each.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import tempfile

import yaml

BENCH = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import bench_audit  # noqa: E402
import bench_wave  # noqa: E402

STRATEGIES = ("linear", "mitogen_linear")


def strategy_dir() -> pathlib.Path | None:
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        return None
    return pathlib.Path(spec.origin).parent / "plugins" / "strategy"


def audit(nodes: int, forks: int, plugins: pathlib.Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(bench_audit.TESTS))
    gpusim = [sys.executable, "-m", "gpusim"]
    result: dict = {"bench": "audit", "nodes": nodes, "forks": forks}
    with tempfile.TemporaryDirectory(prefix="bench-mitogen-") as tmp:
        tmp_path = pathlib.Path(tmp)
        (tmp_path / "spec.yml").write_text(yaml.safe_dump(bench_audit.spec(nodes)))
        workdir = tmp_path / "fleet"
        bench_audit.run([*gpusim, "up", "--spec", str(tmp_path / "spec.yml"), "--workdir", str(workdir)], env=env)
        try:
            inventory = str(workdir / "inventory" / "hosts.yml")
            for strategy in STRATEGIES:
                ansible_env = dict(os.environ, ANSIBLE_CONFIG=str(workdir / "ansible.cfg"), ANSIBLE_HOST_KEY_CHECKING="False",
                                   ANSIBLE_STRATEGY=strategy, ANSIBLE_STRATEGY_PLUGINS=str(plugins), ANSIBLE_TIMEOUT="60",
                                   ANSIBLE_COLLECTIONS_PATH=f"{bench_audit.REPO / '.collections'}")
                wall, cpu = bench_audit.timed([str(bench_audit.BIN / "ansible"), "gpu_nodes", "-i", inventory, "-m", "ansible.builtin.ping",
                                               "-f", str(forks)], env=ansible_env)
                result[f"ping_{strategy}_s"], result[f"ping_{strategy}_cpu_s"] = wall, cpu
                wall, cpu = bench_audit.timed([str(bench_audit.BIN / "ansible-playbook"), "-i", inventory,
                                               str(bench_audit.REPO / "playbooks" / "audit.yml"), "-f", str(forks),
                                               "-e", f"gpufleet_report_dir={tmp_path / strategy}"], env=ansible_env)
                totals = json.loads((tmp_path / strategy / "fleet-report.json").read_text())["totals"]
                if totals["nodes"] != nodes or totals["error"] or totals["unreachable"]:
                    raise SystemExit(f"audit under {strategy}: the report does not hold every node read: {totals}")
                result[f"audit_{strategy}_s"], result[f"audit_{strategy}_cpu_s"] = wall, cpu
        finally:
            bench_audit.run([*gpusim, "down", "--workdir", str(workdir)], env=env)
    for what in ("ping", "audit"):
        result[f"{what}_speedup"] = result[f"{what}_linear_s"] / result[f"{what}_mitogen_linear_s"]
        result[f"{what}_cpu_ratio"] = result[f"{what}_linear_cpu_s"] / result[f"{what}_mitogen_linear_cpu_s"]
    return result


def rollout(nodes: int, forks: int, plugins: pathlib.Path) -> dict:
    result: dict = {"bench": "rollout", "nodes": nodes, "forks": forks}
    saved = {k: os.environ.get(k) for k in ("ANSIBLE_STRATEGY", "ANSIBLE_STRATEGY_PLUGINS", "ANSIBLE_TIMEOUT")}
    try:
        for strategy in STRATEGIES:
            # RolloutFleet.upgrade runs ansible-playbook with this process's environment.
            os.environ.update(ANSIBLE_STRATEGY=strategy, ANSIBLE_STRATEGY_PLUGINS=str(plugins), ANSIBLE_TIMEOUT="60")
            run = bench_wave.bench(nodes, forks, True)
            result[f"{strategy}_s"] = run["playbook_s"]
            result[f"{strategy}_wave_efficiency"] = run["efficiency"]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    result["speedup"] = result["linear_s"] / result["mitogen_linear_s"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--forks", type=int, default=32)
    parser.add_argument("--rollout", action="store_true", help="also time a rollout (a canary and one wave) under each strategy")
    args = parser.parse_args()
    plugins = strategy_dir()
    if plugins is None:
        print("bench_mitogen.py: Mitogen for Ansible is not installed (pip install mitogen==0.3.54): not run")
        return 0
    if os.geteuid() != 0:
        print("bench_mitogen.py needs root (gpusim): not run")
        return 0
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start; mitogen from {plugins}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in audit(args.nodes, args.forks, plugins).items()}), flush=True)
    if args.rollout:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rollout(args.nodes, 16, plugins).items()}), flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
