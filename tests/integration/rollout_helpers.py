"""Plumbing of the rollout's integration tests (tests/integration/test_rollout*.py): playbooks/upgrade.yml on a
simulated fleet over real SSH and real Slurm, a sampler of Slurm's own node states during a run, and readers of
what the run left behind (the node state files, Slurm's nodes and jobs, the recap, the report).

The sampler is the witness of invariant 1: it polls `scontrol show node -o` (every node, one call) while the
playbook runs and writes each answer to a log; the tests count unavailable nodes from that log, never from the
playbook's output.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time

from fleet import ANSIBLE_PLAYBOOK, REPO, ansible_env, run
from fleet import Fleet as BaseFleet
from gpusim import artifacts
from gpusim import state as gstate

UPGRADE = REPO / "playbooks" / "upgrade.yml"
OLD, NEW = "570.124.06", "580.95.05"
# The node state file. Each simulated node has its own /etc (tests/gpusim: overlay per node), so the default
# /etc/ansible/facts.d/gpufleet.fact is the node's own file.
STATE_FILE = "/etc/ansible/facts.d/gpufleet.fact"

# Slurm states that make a node unavailable (as gpufleet.lifecycle.slurm_capacity counts them).
UNAVAILABLE_WORDS = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE",
                     "POWERED_DOWN", "POWER_DOWN", "FUTURE", "UNKNOWN")


def write_runfiles(directory: pathlib.Path, versions=(OLD, NEW)) -> dict[str, dict[str, str]]:
    """Real NVIDIA-Linux-x86_64-<v>.run files (gpusim.artifacts) and their sha256: nvidia_driver_runfiles."""
    runfiles = {}
    for version in versions:
        path = artifacts.write_driver_runfile(directory, version)
        runfiles[version] = {"source": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    return runfiles


def unavailable(state: str) -> bool:
    """Whether a node in this Slurm state (scontrol's State=, e.g. IDLE+DRAIN) is out of service."""
    return state.endswith("*") or any(word in state.split("+") or word in state for word in UNAVAILABLE_WORDS)


class Sampler(threading.Thread):
    """Polls `scontrol show node -o` every `interval` seconds into `log` (one line per node: time, name, state, reason)."""

    def __init__(self, env: dict[str, str], log: pathlib.Path, interval: float = 0.3):
        super().__init__(daemon=True)
        self.env, self.log, self.interval = env, log, interval
        self.stopped = threading.Event()
        self.samples = 0
        # The last state slurmctld showed of each job (finished jobs leave its memory after MinJobAge).
        self.jobs: dict[str, dict[str, str]] = {}

    def run(self) -> None:
        with self.log.open("a") as out:
            while not self.stopped.is_set():
                now = time.time()
                done = subprocess.run(["scontrol", "show", "node", "-o"], env=self.env, capture_output=True, text=True,
                                      timeout=10, check=False)
                if done.returncode == 0:
                    for line in done.stdout.splitlines():
                        name = re.search(r"NodeName=(\S+)", line)
                        state = re.search(r" State=(\S+)", line)
                        reason = re.search(r" Reason=(.*?)(?: \w+=|$)", line)
                        if name and state:
                            out.write(json.dumps({"t": now, "node": name.group(1), "state": state.group(1),
                                                  "reason": reason.group(1) if reason else ""}) + "\n")
                    out.flush()
                    self.samples += 1
                jobs = subprocess.run(["scontrol", "show", "job", "-o"], env=self.env, capture_output=True, text=True,
                                      timeout=10, check=False)
                for line in jobs.stdout.splitlines() if jobs.returncode == 0 else []:
                    fields = dict(re.findall(r"(\w+)=(\S*)", line))
                    if "JobId" in fields:
                        self.jobs[fields["JobId"]] = {"state": fields.get("JobState", ""), "node": fields.get("NodeList", ""),
                                                      "start": fields.get("StartTime", ""), "end": fields.get("EndTime", ""),
                                                      "exit": fields.get("ExitCode", ""), "seen": now}
                self.stopped.wait(self.interval)

    def stop(self) -> list[dict]:
        self.stopped.set()
        self.join(timeout=15)
        return read_samples(self.log)


def read_samples(log: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def by_time(samples: list[dict]) -> dict[float, dict[str, dict]]:
    """{sample time: {node: sample}}."""
    out: dict[float, dict[str, dict]] = {}
    for s in samples:
        out.setdefault(s["t"], {})[s["node"]] = s
    return out


def max_unavailable(samples: list[dict], pool: list[str]) -> tuple[int, float, list[str]]:
    """The most pool nodes Slurm showed out of service in one sample: (count, time, nodes)."""
    worst = (0, 0.0, [])
    for t, nodes in sorted(by_time(samples).items()):
        out = sorted(n for n in pool if n in nodes and unavailable(nodes[n]["state"]))
        if len(out) > worst[0]:
            worst = (len(out), t, out)
    return worst


def parse_nodes(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show node -o` (one line per node) -> {name: {state, reason}}; lines without NodeName or State= are left out."""
    out = {}
    for line in text.splitlines():
        name, state = re.search(r"NodeName=(\S+)", line), re.search(r" State=(\S+)", line)
        if name and state:
            reason = re.search(r" Reason=(.*?)(?: \w+=|$)", line)
            out[name.group(1)] = {"state": state.group(1), "reason": reason.group(1).strip() if reason else ""}
    return out


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP of ansible-playbook's default output: {host: {ok, changed, unreachable, failed, ...}}."""
    out = {}
    for line in stdout.split("PLAY RECAP", 1)[-1].splitlines():
        m = re.match(r"^(\S+)\s+:\s+(.*)$", line.strip())
        if m:
            out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return out


def failures(stdout: str, context: int = 2500) -> str:
    """What ansible-playbook printed around each failed task (fatal: / failed: lines), for a test's message."""
    out = []
    for m in re.finditer(r"^(fatal|failed): \[.*$", stdout, re.M):
        start = stdout.rfind("TASK [", 0, m.start())
        out.append(stdout[max(start, 0):m.end() + context])
    return "\n...\n".join(out)[-12000:] or stdout[-6000:]


class RolloutFleet(BaseFleet):
    """A simulated fleet with the rollout's helpers."""

    def __init__(self, workdir: pathlib.Path, runfiles: dict[str, dict[str, str]]):
        super().__init__(workdir)
        self.runfiles = runfiles
        self.names = sorted(self.address)

    # --- running the rollout ---------------------------------------------------------------------------
    def extra_vars(self, report_dir: pathlib.Path, **extra) -> dict:
        """The rollout's variables for the tests: scaled timing, the runfiles, the per-node state file."""
        return {
            "gpufleet_targets": "gpu_nodes", "gpufleet_report_dir": str(report_dir),
            "gpufleet_soak_seconds": 1, "gpufleet_wave_pause_seconds": 1, "gpufleet_capacity_poll_seconds": 1,
            "gpufleet_capacity_wait_seconds": 120, "gpufleet_drain_timeout": 120, "gpufleet_reboot_timeout": 60,
            "gpufleet_stop_file": str(self.workdir / "gpufleet.stop"),
            "gpufleet_state_file": STATE_FILE,
            "nvidia_driver_runfiles": self.runfiles, "nvidia_driver_reboot_timeout": 60, "nvidia_driver_poll_interval": 1,
            "gpu_validate_poll_interval": 1, "gpu_validate_level": "quick", "node_maintenance_poll_interval": 1,
            # Kernel holds are the driver role's own test (test_nvidia_driver.py); here they would only add tasks.
            "nvidia_driver_hold_kernel": False,
            **extra,
        }

    def upgrade_cmd(self, report_dir: pathlib.Path, forks: int = 16, **extra) -> list[str]:
        return [str(ANSIBLE_PLAYBOOK), "-i", str(self.inventory), str(UPGRADE), "-f", str(forks),
                "-e", json.dumps(self.extra_vars(report_dir, **extra))]

    def upgrade(self, report_dir: pathlib.Path, *, timeout: float = 1800, forks: int = 16, **extra) -> subprocess.CompletedProcess:
        """Run playbooks/upgrade.yml to its end."""
        return run(self.upgrade_cmd(report_dir, forks=forks, **extra), env=ansible_env(), timeout=timeout)

    def start_upgrade(self, report_dir: pathlib.Path, log: pathlib.Path, *, forks: int = 16, **extra) -> subprocess.Popen:
        """Start playbooks/upgrade.yml in its own session, output to log (for the kill and second-rollout tests)."""
        out = log.open("w")
        return subprocess.Popen(self.upgrade_cmd(report_dir, forks=forks, **extra), env=ansible_env(), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """SIGKILL the ansible-playbook process (only it: its forks die with their parent's pipes, as on a real kill)."""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # Ansible's workers of the killed run: end them too (they are in its session), as a person's Ctrl-C would not.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def sampler(self, log: pathlib.Path) -> Sampler:
        s = Sampler(self.slurm_env, log)
        s.start()
        return s

    # --- what the run left behind ------------------------------------------------------------------------
    def sim(self, name: str) -> dict:
        return gstate.load(self.node_dir(name))

    def driver(self, name: str) -> str | None:
        return (self.sim(name).get("driver") or {}).get("version")

    def state_file(self, name: str) -> dict:
        """The node state file, read on the node over SSH ({} when there is none)."""
        proc = self.ssh(name, f"cat {STATE_FILE} 2>/dev/null || true")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout) if proc.stdout.strip() else {}

    def rollout_section(self, name: str) -> dict:
        return self.state_file(name).get("rollout") or {}

    def scontrol(self, *args: str) -> str:
        proc = run(["scontrol", *args], env=self.slurm_env, timeout=30)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def node(self, name: str) -> dict[str, str]:
        """Slurm's view of a node: {state, reason}."""
        line = self.scontrol("show", "node", "-o", name)
        state = re.search(r" State=(\S+)", line).group(1)
        reason = re.search(r" Reason=(.*?)(?: \w+=|$)", line)
        return {"state": state, "reason": reason.group(1).strip() if reason else ""}

    def nodes(self) -> dict[str, dict[str, str]]:
        """Slurm's view of every node in one `scontrol show node -o` call: {name: {state, reason}} (for loops that poll
        the whole fleet while a rollout runs: one scontrol per poll, not one per node, leaves the CPU to the rollout)."""
        return parse_nodes(self.scontrol("show", "node", "-o"))

    def submit(self, name: str, seconds: float) -> str:
        """A job of `seconds` on the node (sbatch from the controller); its id."""
        proc = run(["sbatch", "--parsable", "-w", name, "-J", f"rollout-{name}", "-o", "/dev/null", "-D", "/tmp",
                    "--wrap", f"sleep {seconds}"], env=self.slurm_env, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """{state, node, start, end, exit} of a job from slurmctld (MinJobAge keeps finished jobs 300 s)."""
        line = self.scontrol("show", "job", "-o", job_id)
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        return {"state": fields.get("JobState", ""), "node": fields.get("NodeList", ""), "start": fields.get("StartTime", ""),
                "end": fields.get("EndTime", ""), "exit": fields.get("ExitCode", "")}

    def wait_jobs_running(self, ids: list[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.job(j)["state"] == "RUNNING" for j in ids):
                return
            time.sleep(0.3)
        raise AssertionError(f"jobs {ids} did not all start: {[self.job(j) for j in ids]}")

    def drain_as_admin(self, name: str, reason: str) -> None:
        """Drain a node the way a person does (no gpufleet marker in the reason)."""
        self.scontrol("update", f"nodename={name}", "state=drain", f"reason={reason}")

    def fault(self, name: str, kind: str, **params) -> None:
        from fleet import gpusim
        done = gpusim("fault", name, kind, *[f"{k}={v}" for k, v in params.items()], workdir=self.workdir)
        assert done.returncode == 0, done.stdout + done.stderr

    def phases(self, name: str) -> list[dict]:
        return self.rollout_section(name).get("phases") or []

    def phase(self, name: str, phase: str) -> dict | None:
        """The node's last recorded phase of that name."""
        found = [p for p in self.phases(name) if p.get("name") == phase]
        return found[-1] if found else None


def report_json(report_dir: pathlib.Path) -> dict:
    return json.loads((report_dir / "rollout-report.json").read_text())


def waves_of(report: dict) -> dict[int, list[str]]:
    """{wave: [node, ...]} of a rollout report (0 is the canary; nodes not planned are left out)."""
    return {w["wave"]: list(w["nodes"]) for w in report["waves"] if w["wave"] is not None}
