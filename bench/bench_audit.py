"""What the audit costs the controller: playbooks/audit.yml against the ping floor and a hand-written audit.

Needs root and tests/gpusim/install-deps.sh. Usage:
    .venv/bin/python bench/bench_audit.py [--sizes 64 128 (default: 16)] [--forks 32] [--repeat 1] [--playbook OTHER.yml ...]
        [--controller-cpus 0-1]
--controller-cpus puts the controller (ansible and what it starts) on those CPUs and the simulated fleet (its nodes'
sshd, modules and tools, slurmctld, slurmd, the BMCs) on every other CPU, as on a real fleet where the nodes' work is
not the controller's: on a machine with enough CPUs for the fleet, the wall times then measure the controller.
For each size: brings up a simulated fleet (one HGX H100 SKU with 8 ConnectX-7, a BMC per node, the spec shape of
bench_gpusim_up.py) on 127.0.120.x (BMCs on 127.0.220.x), slurmctld on 16300 and slurmd on 16301.., then times with
the same forks and the fleet's ansible.cfg (pipelining on):
  ping    `ansible gpu_nodes -m ping`: one module per host, the floor of any audit;
  ping_play  the same ping as one registered task of a playbook (the play shape of the audit's gather);
  gather  the audit's first play alone (gpu_facts, registered): what the gather costs against ping_play;
  naive   a playbook of the five `command` tasks a hand-written audit runs (nvidia-smi -q -x, nvidia-smi --query-gpu,
          cat /proc/driver/nvidia/version, mlxfwmanager --query, dmesg), reading no BMC;
  audit   playbooks/audit.yml (gpu_facts, each BMC's firmware inventory over Redfish, the fleet report);
  audit_no_bmc  the same without BMC credentials (the Redfish reads skipped): what the out-of-band reads cost;
  and every --playbook given (an older audit.yml, say), run like audit.
Prints, for each, seconds in all and per host, the controller's CPU seconds per host (ansible and the processes it waited
for: workers, ssh clients, modules run on the controller; not the nodes' tools nor the BMCs, which share this machine's CPUs
here but not in a real fleet), the CPU seconds per host of everything else busy on this machine meanwhile (the simulated
nodes' sshd, modules and tools, and the BMCs), the ratios to ping, the machine's CPUs and load; checks that each report
counts every node.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
BIN = REPO / ".venv" / "bin"
# This bench's own addresses and ports (no other fleet spec or integration test uses them).
LOOPBACK = 120
SLURM_PORT = 16300

NAIVE_AUDIT = [
    {
        "name": "A hand-written audit: one command task per tool",
        "hosts": "gpu_nodes",
        "gather_facts": False,
        "tasks": [
            {"name": "nvidia-smi -q -x", "ansible.builtin.command": {"argv": ["nvidia-smi", "-q", "-x"]}, "changed_when": False,
             "register": "smi_xml"},
            {"name": "nvidia-smi --query-gpu",
             "ansible.builtin.command": {"argv": ["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,vbios_version",
                                                  "--format=csv,noheader"]},
             "changed_when": False, "register": "smi_csv"},
            {"name": "Driver version", "ansible.builtin.command": {"argv": ["cat", "/proc/driver/nvidia/version"]}, "changed_when": False,
             "register": "proc_version"},
            {"name": "ConnectX firmware", "ansible.builtin.command": {"argv": ["mlxfwmanager", "--query"]}, "changed_when": False,
             "failed_when": False, "register": "mlx"},
            {"name": "Xid events", "ansible.builtin.command": {"argv": ["dmesg"]}, "changed_when": False, "register": "kernel_log"},
        ],
    }
]

# The audit's first play alone (gpu_facts, registered, one task per host), and the same play shape around a ping: the
# gather against its floor, apart from the audit's second play (the BMC reads and the report, on the controller).
GATHER_PLAY = [
    {"name": "The audit's gather play alone", "hosts": "gpu_nodes", "gather_facts": False,
     "tasks": [{"name": "Gather GPU facts", "gpufleet.lifecycle.gpu_facts": {}, "register": "gpufleet_audit_gathered", "failed_when": False}]}
]
PING_PLAY = [
    {"name": "A ping in the same play shape", "hosts": "gpu_nodes", "gather_facts": False,
     "tasks": [{"name": "Ping", "ansible.builtin.ping": {}, "register": "pinged"}]}
]


def spec(size: int) -> dict:
    return {
        "fleet": {"name": f"bench-audit-{size}", "loopback": LOOPBACK, "slurm_port": SLURM_PORT},
        "timing": {"reboot": 1},
        "skus": {"hgx_h100": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True, "cpus": 8,
                              "nics": [{"type": "ConnectX-7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax",
                                        "fw": "28.43.1014", "count": 8}],
                              "bom": {"driver": {"version": "570.124.06"}, "fabricmanager": "570.124.06",
                                      "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 8}, "nic_firmware": {"MT_0000000834": "28.43.1014"}}}},
        "nodes": [{"count": size, "prefix": "audit-", "width": 3, "sku": "hgx_h100", "driver": "570.124.06"}],
    }


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu_s() -> float:
    """CPU seconds this machine's CPUs have spent busy since boot (/proc/stat: every state but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def parse_cpus(text: str) -> set[int]:
    """The CPUs of a taskset-style list ("0-1,4")."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list: give numbers and ranges, as 0-1,4")
        if high and int(high) < int(low):
            raise ValueError(f"{part!r} in {text!r} is an empty range")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def cpu_split(controller: str | None, available: set[int]) -> tuple[list[str], list[str]]:
    """(the controller's command prefix, the fleet's): `taskset -c` on the given CPUs and on all the others; ([], []) for
    no split. Refuses CPUs this process may not use, and a split that leaves the fleet none."""
    if not controller:
        return [], []
    wanted = parse_cpus(controller)
    if not wanted <= available:
        raise ValueError(f"--controller-cpus {controller}: CPUs {sorted(wanted - available)} are not available here ({sorted(available)})")
    rest = sorted(available - wanted)
    if not rest:
        raise ValueError(f"--controller-cpus {controller} leaves no CPU for the simulated fleet ({sorted(available)} available)")
    return ["taskset", "-c", ",".join(map(str, sorted(wanted)))], ["taskset", "-c", ",".join(map(str, rest))]


def run(cmd: list[str], **kw) -> float:
    return timed(cmd, **kw)[0]


def timed(cmd: list[str], **kw) -> tuple[float, float, float]:
    """(wall seconds, controller CPU seconds, machine CPU seconds) of a command: the controller's is the CPU of the process
    and of its children that it waited for (ansible's workers, ssh clients, modules run on the controller); the machine's
    adds the simulated nodes' sshd, modules and tools, and the BMCs (everything busy on this machine meanwhile)."""
    cpu_before, machine_before = children_cpu_s(), machine_cpu_s()
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        fatal = "\n".join(line[:2000] for line in done.stdout.splitlines() if "fatal:" in line or "FAILED!" in line)
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{fatal}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return elapsed, children_cpu_s() - cpu_before, machine_cpu_s() - machine_before


def best_of(repeat: int, cmd: list[str], **kw) -> tuple[float, float, float]:
    return min(timed(cmd, **kw) for _ in range(repeat))


def measure(workdir: pathlib.Path, tmp_path: pathlib.Path, size: int, forks: int, repeat: int, playbooks: list[pathlib.Path],
            pipelining: bool = True, pin: list[str] | None = None) -> dict:
    """The timings of one fleet that is up in ``workdir``; ``pin`` prefixes the controller's commands (taskset)."""
    pin = pin or []
    (tmp_path / "naive.yml").write_text(yaml.safe_dump(NAIVE_AUDIT, sort_keys=False))
    (tmp_path / "gather.yml").write_text(yaml.safe_dump(GATHER_PLAY, sort_keys=False))
    (tmp_path / "ping_play.yml").write_text(yaml.safe_dump(PING_PLAY, sort_keys=False))
    ansible_env = dict(os.environ, ANSIBLE_CONFIG=str(workdir / "ansible.cfg"), ANSIBLE_HOST_KEY_CHECKING="False",
                       ANSIBLE_PIPELINING=str(pipelining),
                       ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}")
    inventory = str(workdir / "inventory" / "hosts.yml")
    playbook_cmd = [*pin, str(BIN / "ansible-playbook"), "-i", inventory, "-f", str(forks)]
    result: dict = {"nodes": size, "forks": forks, "pipelining": pipelining}
    timings = {}
    timings["ping"] = best_of(repeat, [*pin, str(BIN / "ansible"), "gpu_nodes", "-i", inventory, "-m", "ansible.builtin.ping", "-f", str(forks)],
                              env=ansible_env)
    timings["naive"] = best_of(repeat, [*playbook_cmd, str(tmp_path / "naive.yml")], env=ansible_env)
    timings["ping_play"] = best_of(repeat, [*playbook_cmd, str(tmp_path / "ping_play.yml")], env=ansible_env)
    timings["gather"] = best_of(repeat, [*playbook_cmd, str(tmp_path / "gather.yml")], env=ansible_env)
    audit = REPO / "playbooks" / "audit.yml"
    # audit_no_bmc: the same playbook with no BMC password (every BMC read skipped), to show what the Redfish reads cost.
    variants = [("audit", audit, []), ("audit_no_bmc", audit, ["-e", "bmc_password="]), *((str(p), p, []) for p in playbooks)]
    for label, playbook, extra in variants:
        report_dir = tmp_path / "report"
        timings[label] = best_of(repeat, [*playbook_cmd, str(playbook), "-e", f"gpufleet_report_dir={report_dir}", *extra], env=ansible_env)
        totals = json.loads((report_dir / "fleet-report.json").read_text())["totals"]
        if totals["nodes"] != size or totals["error"] or totals["unreachable"]:
            raise SystemExit(f"{label}: the report does not hold every node read: {totals}")
        result[f"{label}_report_ok_nodes"] = totals["ok"]
    for label, (wall, cpu, machine) in timings.items():
        result[f"{label}_s"] = wall
        result[f"{label}_s_per_host"] = wall / size
        result[f"{label}_controller_cpu_s_per_host"] = cpu / size
        # What the simulated nodes (and BMCs) cost on this machine: on a real fleet it is spent on the nodes.
        result[f"{label}_node_cpu_s_per_host"] = max(machine - cpu, 0.0) / size
    for label, _playbook, _extra in variants:
        result[f"{label}_over_ping"] = timings[label][0] / timings["ping"][0]
        result[f"{label}_cpu_over_ping_cpu"] = timings[label][1] / timings["ping"][1]
    result["naive_over_ping"] = timings["naive"][0] / timings["ping"][0]
    result["gather_over_ping_play"] = timings["gather"][0] / timings["ping_play"][0]
    result["gather_cpu_over_ping_play_cpu"] = timings["gather"][1] / timings["ping_play"][1]
    result["naive_over_audit"] = timings["naive"][0] / timings["audit"][0]
    return result


def bench(size: int, forks: int, repeat: int, playbooks: list[pathlib.Path], pipelining: bool, workdir: pathlib.Path | None,
          split: tuple[list[str], list[str]] = ([], [])) -> dict:
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    gpusim = [sys.executable, "-m", "gpusim"]
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        tmp_path = pathlib.Path(tmp)
        if workdir is not None:  # a fleet already up (gpusim up --spec ... --workdir DIR): measured, left up
            result = measure(workdir, tmp_path, size, forks, repeat, playbooks, pipelining, split[0])
        else:
            (tmp_path / "spec.yml").write_text(yaml.safe_dump(spec(size)))
            fleet = tmp_path / "fleet"
            # Everything the fleet starts (BMCs, slurmctld, the supervisor, each node's sshd and slurmd) inherits this affinity.
            up_s = run([*split[1], *gpusim, "up", "--spec", str(tmp_path / "spec.yml"), "--workdir", str(fleet)], env=env)
            try:
                result = measure(fleet, tmp_path, size, forks, repeat, playbooks, pipelining, split[0])
            finally:
                result_down_s = run([*gpusim, "down", "--workdir", str(fleet)], env=env)
            result.update(up_s=up_s, down_s=result_down_s)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # A few minutes by default (make bench); the figures in docs/performance.md are --sizes 64 128.
    parser.add_argument("--sizes", type=int, nargs="+", default=[16])
    parser.add_argument("--forks", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each playbook; the fastest is kept")
    parser.add_argument("--playbook", type=pathlib.Path, action="append", default=[], help="another audit playbook to time (repeatable)")
    parser.add_argument("--no-pipelining", action="store_true", help="run everything with ANSIBLE_PIPELINING=False")
    parser.add_argument("--workdir", type=pathlib.Path, help="measure the fleet already up in this gpusim workdir (one size: its node count)")
    parser.add_argument("--controller-cpus", help="run the controller on these CPUs (taskset list, as 0-1) and the fleet on the others")
    args = parser.parse_args()
    try:
        split = cpu_split(args.controller_cpus, os.sched_getaffinity(0))
    except ValueError as exc:
        parser.error(str(exc))
    if os.geteuid() != 0:
        print("bench_audit.py needs root (gpusim): not run")
        return 0
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start; forks {args.forks}"
          + (f"; controller on CPUs {split[0][2]}, the simulated fleet on {split[1][2]}" if split[0] else ""))
    if split[0] and args.workdir is not None:
        print("(--workdir: the fleet keeps the CPUs it was started on; only the controller is placed)")
    if args.workdir is not None:
        args.sizes = [len(yaml.safe_load((args.workdir / "inventory" / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]["children"]
                          ["hgx_h100"]["hosts"])]
    for size in args.sizes:
        print(json.dumps(bench(size, args.forks, args.repeat, [p.resolve() for p in args.playbook], not args.no_pipelining, args.workdir, split)),
              flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
