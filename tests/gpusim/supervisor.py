"""The fleet's supervisor: carries out the nodes' reboot and power requests, and nothing else.

Started detached by `gpusim up` (`python -m gpusim.supervisor --workdir W`), stopped by
`gpusim down` (SIGTERM). It polls each NODE_DIR/reboot.request (written by the simulated
shutdown/reboot/systemctl, by Slurm's RebootProgram and by the node's BMC: reboot, poweroff, on,
powercycle); for each request it waits the request's
delay, kills every process of the node (sshd with its open sessions, slurmd with its jobs), waits
the node's timing.reboot, calls state.boot() and, unless the node must not come back or was
powered off, boots it again. A node whose processes die otherwise is left down.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from gpusim import node, slurm, state

REQUEST = "reboot.request"
# reboot: host restart; poweroff; on: power on a node that is off; powercycle: an AC power cycle (a restart
# that activates all staged firmware). Written by the node's shutdown/systemctl and by its BMC.
ACTIONS = ("reboot", "poweroff", "on", "powercycle")
HANDLING = "reboot.handling"
# A request file that does not parse yet may be half-written by a writer that does not rename.
PARTIAL_GRACE_S = 2.0
# Whole seconds between the second a reboot was asked in and the second the node boots in (see _reboot): 2 are
# enough by the model of tests/unit/gpusim/test_reboot_timing.py, 1 is not; one more for margin.
BOOT_AFTER_REQUEST_S = 3


def boot_second(requested_at: float | None, seen_at: float) -> int:
    """The first whole second a node rebooted on request may boot in: BOOT_AFTER_REQUEST_S after the request's."""
    asked = seen_at if not isinstance(requested_at, (int, float)) else min(seen_at, float(requested_at))
    return int(asked) + BOOT_AFTER_REQUEST_S


def log(message: str) -> None:
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {message}\n")
    sys.stdout.flush()


class Supervisor:
    def __init__(self, workdir: Path, interval: float):
        self.workdir = workdir
        self.interval = interval
        self.stop = threading.Event()
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        record = json.loads((workdir / "fleet.json").read_text())
        self.nodes = [(r["name"], Path(r["node_dir"])) for r in record["nodes"]]

    def take_request(self, nd: Path) -> dict | None:
        req = nd / REQUEST
        try:
            text = req.read_text()
            age = time.time() - req.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            request = json.loads(text)
            if not isinstance(request, dict):
                raise ValueError("not an object")
        except ValueError:
            if age < PARTIAL_GRACE_S:
                return None
            request = {"action": "reboot", "delay_s": 0, "note": "unreadable request"}
        with contextlib.suppress(FileNotFoundError):
            os.replace(req, nd / HANDLING)
        return request

    def poll(self) -> None:
        for name, nd in self.nodes:
            with self.lock:
                if name in self.busy:
                    continue
            request = self.take_request(nd)
            if request is None:
                continue
            with self.lock:
                self.busy.add(name)
            threading.Thread(target=self.reboot, args=(name, nd, request), name=f"reboot-{name}", daemon=True).start()

    def reboot(self, name: str, nd: Path, request: dict) -> None:
        try:
            self._reboot(name, nd, request)
        except Exception:  # one node's failure must not stop the supervisor
            log(f"{name}: reboot failed:\n{traceback.format_exc()}")
            node.set_power(nd, "down")
        finally:
            with contextlib.suppress(FileNotFoundError):
                (nd / HANDLING).unlink()
            with self.lock:
                self.busy.discard(name)

    def _reboot(self, name: str, nd: Path, request: dict) -> None:
        action = request.get("action", "reboot")
        if action not in ACTIONS:
            log(f"{name}: unknown action {action!r} ignored")
            return
        seen_at = time.time()
        delay = max(float(request.get("delay_s") or 0), 0.0)
        log(f"{name}: {action} requested (delay {delay:g}s)")
        if self.stop.wait(delay):
            return
        if request.get("by") == "slurm" and state.update(nd, state.take_lost_reboot):
            log(f"{name}: Slurm's reboot request lost (fault reboot_lost): the node stays up on its boot")
            return
        if action == "on":
            if node.processes(nd):
                log(f"{name}: already on")
                return
        else:
            jobs = slurm.record_lost_jobs(self.workdir, name, nd)
            node.set_power(nd, "down" if action == "poweroff" else "rebooting")
            node.kill(nd)
            if jobs:
                log(f"{name}: Slurm's job(s) {', '.join(jobs)} died with the node")
            if action == "poweroff":
                log(f"{name}: powered off")
                return
            try:
                reboot_s = float(state.load(nd)["timing"]["reboot"])
            except (FileNotFoundError, KeyError, TypeError, ValueError):
                reboot_s = 5.0
            if self.stop.wait(reboot_s):
                return
        if not state.boot(nd, power_cycle=action == "powercycle"):
            node.set_power(nd, "down")
            log(f"{name}: does not come back")
            return
        with contextlib.suppress(FileNotFoundError):
            (nd / REQUEST).unlink()  # written while it went down: that boot already happened
        # slurmctld takes a registration for the reboot it asked for only when the node's boot time is not before
        # boot_req_time (node_mgr.c waiting_for_node_boot: boot_time < boot_req_time is "still waiting"), in whole
        # seconds: boot_time = now - sysinfo uptime (rounded up by the kernel), and the node's time namespace starts
        # its uptime at 0..1 s (unshare takes whole seconds), so the boot time slurmd reports can be up to 2 s before
        # the real boot. A real reboot lasts minutes; here the boot waits until 3 s after the request's second, else
        # a reboot of timing.reboot 1 s was "still waiting" until ResumeTimeout set the node DOWN.
        first_second = boot_second(request.get("requested_at"), seen_at)
        while int(time.time()) < first_second and not self.stop.wait(0.05):
            pass
        delay, jobs = slurm.slurmd_delay(nd)
        node.boot(nd, "reboot.sh", slurmd_delay=delay)
        log(f"{name}: up again, boot_id {state.load(nd)['boot_id']}"
            + (f"; slurmd starts in {delay:.1f}s (Slurm's grace for job(s) {', '.join(jobs)}: a real reboot outlasts it)"
               if delay else ""))

    def run(self) -> None:
        log(f"supervising {len(self.nodes)} nodes in {self.workdir}")
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(self.interval)
        log("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpusim.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between polls of the reboot requests")
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    sup = Supervisor(workdir, args.interval)
    signal.signal(signal.SIGTERM, lambda *_: sup.stop.set())
    signal.signal(signal.SIGINT, lambda *_: sup.stop.set())
    pid_file = workdir / "supervisor.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    try:
        sup.run()
    finally:
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
