"""Real Slurm for the simulated fleet: munged, one slurmctld, one slurmd per node.

Everything lives in WORKDIR/slurm and WORKDIR/munge. The slurmd of a node runs inside the
node's namespaces (started by its boot.sh), so a simulated reboot kills it and its jobs, and
its spool (/var/lib/gpusim/slurmd) is the node's own. Clients find the configuration through
SLURM_CONF (set by `env()`, by the nodes' sshd, and /etc/slurm is bind-mounted in each node).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import subprocess
import time
from pathlib import Path

from gpusim import progress
from gpusim.spec import Fleet

REBOOT_PROGRAM = """#!/bin/sh
# Slurm's RebootProgram for the simulated fleet: slurmd runs it inside the node's namespace, where
# /var/lib/gpusim is the node's folder; the gpusim supervisor carries out the request.
set -e
req=/var/lib/gpusim/reboot.request
printf '{"requested_at": %s, "delay_s": 0, "action": "reboot", "by": "slurm"}\\n' "$(date +%s)" > "$req.slurm.tmp"
mv "$req.slurm.tmp" "$req"
"""


# slurmctld's grace for a batch job it believes runs on a node that registers without it: a job last seen
# less than BatchStartTimeout + min(10, MessageTimeout) seconds ago is not purged (it may still be starting).
BATCH_START_TIMEOUT = 10
MESSAGE_TIMEOUT = 10
JOB_GRACE_S = BATCH_START_TIMEOUT + min(10, MESSAGE_TIMEOUT) + 2  # + margin for the 2-CPU machine
LOST_JOBS = "slurm-lost-jobs.json"  # NODE_DIR: Slurm's jobs on the node when it went down


class Paths:
    def __init__(self, workdir: Path):
        self.root = workdir / "slurm"
        self.etc = self.root / "etc"
        self.conf = self.etc / "slurm.conf"
        self.state = self.root / "state"
        self.log = self.root / "log"
        self.ctld_pid = self.root / "slurmctld.pid"
        self.reboot_program = self.root / "reboot-node"
        self.munge = workdir / "munge"
        self.munge_key = self.munge / "munge.key"
        self.munge_socket = self.munge / "munge.socket.2"
        self.munge_pid = self.munge / "munged.pid"


def env(workdir: Path) -> dict[str, str]:
    """Environment for Slurm clients (scontrol, sbatch, squeue) run on the controller."""
    result = dict(os.environ)
    result["SLURM_CONF"] = str(Paths(workdir).conf)
    return result


def config(fleet: Fleet, workdir: Path) -> str:
    paths = Paths(workdir)
    controller = socket.gethostname().split(".")[0]
    lines = [
        f"# Slurm configuration of the simulated fleet {fleet.name} (written by gpusim)",
        f"ClusterName={fleet.name.replace('-', '_')[:40]}",
        f"SlurmctldHost={controller}(127.0.0.1)",
        f"SlurmctldPort={fleet.slurm_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={paths.munge_socket}",
        f"StateSaveLocation={paths.state}",
        "SlurmdSpoolDir=/var/lib/gpusim/slurmd",
        f"SlurmctldPidFile={paths.ctld_pid}",
        "SlurmdPidFile=/run/slurmd.pid",  # the node's /run: a tmpfs, empty at each boot
        f"SlurmctldLogFile={paths.log / 'slurmctld.log'}",
        "SlurmdLogFile=/var/lib/gpusim/slurmd.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "MailProg=/bin/true",
        # The simulated nodes are smaller than their SKU says: trust the configuration.
        "SlurmdParameters=config_overrides",
        # A node that rebooted (simulated reboot, RebootProgram) comes back into service.
        "ReturnToService=2",
        f"RebootProgram={paths.reboot_program}",
        "ResumeTimeout=600",
        "SlurmdTimeout=60",  # a node down longer than this shows as not responding (down*)
        "SlurmctldTimeout=30",
        f"MessageTimeout={MESSAGE_TIMEOUT}",
        f"BatchStartTimeout={BATCH_START_TIMEOUT}",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        "TreeWidth=128",
    ]
    for index, plan in enumerate(fleet.nodes):
        lines.append(
            f"NodeName={plan.name} NodeAddr={plan.address} NodeHostname={plan.name} Port={fleet.slurmd_port(index)} "
            f"CPUs={plan.cpus} RealMemory={plan.memory_mb} Feature={plan.spec['sku']} State=UNKNOWN"
        )
    lines.append(f"PartitionName={fleet.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO")
    return "\n".join(lines) + "\n"


def prepare(fleet: Fleet, workdir: Path) -> Paths:
    paths = Paths(workdir)
    for folder in (paths.etc, paths.state, paths.log, paths.munge):
        folder.mkdir(parents=True, exist_ok=True)
    paths.munge.chmod(0o700)
    paths.conf.write_text(config(fleet, workdir))
    paths.reboot_program.write_text(REBOOT_PROGRAM)
    paths.reboot_program.chmod(0o755)
    if not paths.munge_key.exists():
        paths.munge_key.write_bytes(os.urandom(1024))
        paths.munge_key.chmod(0o400)
    return paths


def slurmd_args(name: str, conf: Path, *, rebooted: bool, time_namespace: bool = True) -> list[str]:
    """slurmd's command line at boot: what a real boot runs. The node's time namespace gives slurmd the uptime
    of the node's own boot (Slurm's BootTime); only without one does slurmd need -b (report the uptime since
    slurmd started), else it would report the controller's boot and Slurm would never see the reboot."""
    args = ["/usr/sbin/slurmd", "-f", str(conf), "-N", name]
    if rebooted and not time_namespace:
        args.append("-b")
    return args


def registered_boot_time(register_at: float, clock_zero_at: float) -> int:
    """The BootTime slurmctld records for a node whose slurmd registers at register_at (the controller's clock) and
    whose CLOCK_BOOTTIME read 0 at clock_zero_at: now - up_time in whole seconds (job_mgr.c validate_jobs_on_node),
    up_time from sysinfo(), which the kernel rounds up (tv_sec + (tv_nsec ? 1 : 0))."""
    return math.floor(register_at) - math.ceil(register_at - clock_zero_at)


def jobs_on(workdir: Path, node: str) -> list[str]:
    """Ids of the jobs slurmctld believes run on node (running, completing, suspended, configuring)."""
    try:
        done = subprocess.run(["squeue", "-h", "-w", node, "-t", "R,CG,S,CF", "-o", "%i"], capture_output=True,
                              text=True, env=env(workdir), check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.split() if done.returncode == 0 else []


def record_lost_jobs(workdir: Path, node: str, node_dir: Path) -> list[str]:
    """Before a node goes down (reboot, power off): note Slurm's jobs on it and when it went down."""
    jobs = jobs_on(workdir, node)
    path = node_dir / LOST_JOBS
    if jobs:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"down_at": time.time(), "jobs": jobs}))
        os.replace(tmp, path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return jobs


def slurmd_delay(node_dir: Path) -> tuple[float, list[str]]:
    """(seconds, jobs): how long the node's slurmd must wait at this boot so that slurmctld, when it registers
    without the jobs that died with the node, finds them missing as after a real reboot (which lasts minutes:
    always longer than JOB_GRACE_S). 0 when no job died with it. Consumes the record."""
    path = node_dir / LOST_JOBS
    try:
        record = json.loads(path.read_text())
        path.unlink()
    except (FileNotFoundError, ValueError):
        return 0.0, []
    return max(0.0, float(record["down_at"]) + JOB_GRACE_S - time.time()), list(record["jobs"])


# Slurm's daemons on a loaded machine: given up on only after this long without progress (a new line in their logs, a
# node less to wait for), never after a fixed time.
STALL_S = 120.0


def start_controller(workdir: Path, stall: float = STALL_S) -> None:
    """Start munged and slurmctld (both daemonize) and wait until slurmctld answers, for as long as its log moves."""
    paths = Paths(workdir)
    subprocess.run(
        ["munged", "--force", f"--socket={paths.munge_socket}", f"--key-file={paths.munge_key}",
         f"--pid-file={paths.munge_pid}", f"--log-file={paths.munge / 'munged.log'}",
         f"--seed-file={paths.munge / 'munged.seed'}", "--num-threads=4"],
        check=True, capture_output=True, text=True,
    )
    subprocess.run(["slurmctld", "-f", str(paths.conf)], check=True, capture_output=True, text=True, env=env(workdir))
    ctld_log = paths.log / "slurmctld.log"

    def up() -> bool:
        done = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env(workdir), check=False)
        if "is UP" in done.stdout:
            return True
        pid = pid_from(paths.ctld_pid)
        if pid is not None and not _alive(pid):
            raise RuntimeError(f"gpusim: slurmctld exited while starting; its log ends:\n{progress.tail(ctld_log)}")
        return False

    progress.wait(up, progress=lambda: progress.size(ctld_log), stall=stall, interval=0.2, what="slurmctld's start",
                  missing=lambda: f"scontrol ping does not answer UP; {ctld_log} ends:\n{progress.tail(ctld_log)}")


def pid_from(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def stop_controller(workdir: Path, timeout: float = 10.0) -> None:
    paths = Paths(workdir)
    for pid_file in (paths.ctld_pid, paths.munge_pid):
        pid = pid_from(pid_file)
        if pid is None or not _is(pid, ("slurmctld", "munged")):
            continue
        os.kill(pid, 15)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, 9)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _is(pid: int, names: tuple[str, ...]) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip() in names
    except FileNotFoundError:
        return False


def node_states(workdir: Path) -> dict[str, str]:
    """{node: state} as `sinfo -N` prints it (idle, alloc, mix, drng, drain, down*...)."""
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=env(workdir), check=False)
    states = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def wait_registered(workdir: Path, names: list[str], stall: float = STALL_S) -> None:
    """Wait until every named node has registered (no longer unknown or not responding).

    Waited for by progress: a node registering, or a pending node's slurmd writing to its log, restarts the stall
    clock; after `stall` seconds of neither, the error names the nodes still missing and each one's last log lines.
    """
    pending = set(names)

    def registered() -> bool:
        states = node_states(workdir)
        pending.intersection_update({n for n in pending if not states.get(n) or states[n].endswith("*") or states[n].startswith("unk")})
        return not pending

    def slurmd_log(name: str) -> Path:
        return workdir / "nodes" / name / "slurmd.log"

    def moved() -> tuple:
        return tuple(sorted((n, progress.size(slurmd_log(n))) for n in pending))

    def missing() -> str:
        return "slurmd of " + ", ".join(sorted(pending)) + " did not register with slurmctld; " + "; ".join(
            f"{n}'s slurmd.log ends: {progress.tail(slurmd_log(n), 3) or '(no log)'}" for n in sorted(pending)[:3])

    progress.wait(registered, progress=moved, stall=stall, interval=0.3, what="the nodes' Slurm registration", missing=missing)


def submit_sleep_jobs(workdir: Path, node: str, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        done = subprocess.run(
            ["sbatch", "--parsable", "-w", node, "-J", f"sim-{node}", "-o", "/dev/null", "-D", "/tmp", "--wrap", "sleep 3600"],
            capture_output=True, text=True, env=env(workdir), check=True,
        )
        ids.append(done.stdout.strip().split(";")[0])
    return ids


def wait_running(workdir: Path, job_ids: list[str], timeout: float = 60.0) -> None:
    if not job_ids:
        return
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], capture_output=True, text=True, env=env(workdir), check=False)
        running = set(done.stdout.split())
        missing = [j for j in job_ids if j not in running]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"gpusim: jobs {', '.join(missing)} did not start")
        time.sleep(0.3)
