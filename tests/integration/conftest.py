"""The integration files' order: the longest first.

``make integration`` runs two files at a time (pytest-xdist ``--dist loadfile --no-loadscope-reorder``): a file never
splits, and a worker takes the next file when it is done with one. Starting the longest files first keeps the last
minutes from being one long file on one worker while the other waits (xdist's own reorder sorts by the number of tests
in a file, which put test_molecule and test_rehearsal - one long test each - last).
Seconds are one clean-clone run's on 2 loaded cores (its --durations), for the order only; a file not named runs after
these, in pytest's order.
"""

from __future__ import annotations

import pathlib

SECONDS = {
    "test_rollout_waves.py": 1000,
    "test_rollout.py": 800,
    "test_rollout_resume.py": 750,
    "test_fleet_e2e.py": 700,
    "test_nvidia_driver.py": 350,
    "test_awx_runner.py": 300,
    "test_rollout_firmware.py": 250,
    "test_mlxfw.py": 200,
    "test_rehearsal.py": 150,
    "test_molecule.py": 150,
    "test_node_maintenance.py": 150,
    "test_nvidia_driver_activation.py": 120,
    "test_mitogen.py": 100,
}


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: -SECONDS.get(pathlib.Path(item.path).name, 0))  # stable: a file's tests keep their order
