"""The integration files' order: the longest first.

``make integration`` runs two files at a time (pytest-xdist ``--dist loadfile --no-loadscope-reorder``): a file never
splits, and a worker takes the next file when it is done with one. Starting the longest files first keeps the last
minutes from being one long file on one worker while the other waits (xdist's own reorder sorts by the number of tests
in a file, which put test_molecule and test_rehearsal - one long test each - last).
Seconds are estimates from the clean-clone run of 2026-12-05 on 2 loaded cores (its --durations: setup and calls of
the file's slowest tests), for the order only; a file not named runs after these, in pytest's order.
"""

from __future__ import annotations

import pathlib

import pytest

SECONDS = {
    "test_rollout.py": 530,
    "test_rollout_resume.py": 430,
    "test_fleet_e2e.py": 420,
    "test_rollout_waves.py": 320,
    "test_nvidia_driver.py": 300,
    "test_rollout_firmware.py": 160,
    "test_awx_runner.py": 120,
    "test_mlxfw.py": 120,
    "test_roles_compose.py": 110,
    "test_node_maintenance.py": 100,
    "test_nvfwupd.py": 100,
    "test_rehearsal.py": 90,
    "test_molecule.py": 60,
    "test_nvidia_driver_activation.py": 60,
    "test_mitogen.py": 60,
}


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: -SECONDS.get(pathlib.Path(item.path).name, 0))  # stable: a file's tests keep their order


# What the fleet itself saw, in the report of a failing test: CI keeps only pytest's output, and the fleet (its
# supervisor's reboots, slurmctld's view) is gone with the test's temporary directory. Bounded: the last lines only.
FLEET_LOGS = (("supervisor.log", 80), ("slurm/log/slurmctld.log", 60), ("bmc/bmc.log", 30))


def _fleet_workdirs(item) -> list[pathlib.Path]:
    found = []
    for value in getattr(item, "funcargs", {}).values():
        workdir = getattr(value, "workdir", value)
        if isinstance(workdir, pathlib.Path) and (workdir / "fleet.json").is_file() and workdir not in found:
            found.append(workdir)
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for workdir in _fleet_workdirs(item):
        for name, lines in FLEET_LOGS:
            path = workdir / name
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                report.sections.append((f"fleet {workdir.name}: last {len(tail)} lines of {name}", "\n".join(tail)))
        # The boot log of each node that the failure names (at most four).
        text = str(report.longrepr)
        nodes = sorted(p.name for p in (workdir / "nodes").glob("*") if p.is_dir())
        for node in [n for n in nodes if f"{n}:" in text or f"[{n}]" in text or f"'{n}'" in text][:4]:
            path = workdir / "nodes" / node / "log" / "boot.log"
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-20:]
                report.sections.append((f"fleet {workdir.name}: last {len(tail)} lines of {node}'s log/boot.log", "\n".join(tail)))
