"""One molecule scenario run in full, as `make molecule` and a user's CI run it: `molecule test -s nvidia_driver`.

The scenario (extensions/molecule/nvidia_driver: two PCIe L40S nodes on 127.0.34.x, slurmctld on 19400) brings its
simulated fleet up with the delegated driver's create.yml, converges the nvidia_driver role to the BOM, runs the
converge again (idempotence: molecule fails the step when a task reports a change), converges in check mode, verifies
from the nodes (gpu_facts, the node state file, Slurm) and destroys the fleet. The test reads molecule's own per-action
completion states (`--report`: one `SCENARIO ➜ ACTION: Executed: STATE` line per action of the sequence) rather than
the playbooks' English, and checks that destroy left nothing behind.

Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_molecule.py -m integration -q
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import socket
import tempfile

import pytest
from fleet import PYTHON, REPO, needs_fleet, run

MOLECULE = REPO / ".venv" / "bin" / "molecule"
SCENARIO = "nvidia_driver"
NODE_ADDRESSES = ("127.0.34.1", "127.0.34.2")  # extensions/molecule/nvidia_driver/gpusim/fleet.yml
SLURM_PORT = 19400

pytestmark = needs_fleet()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# molecule's report line of one action (molecule.ansi_output.format_full_completion_line): "SCENARIO ➜ ACTION: ..."
# with colour, "SCENARIO > ACTION: ..." under NO_COLOR.
ACTION = re.compile(rf"^{SCENARIO} (?:\u279c|>) (?P<action>[a-z_]+): (?P<message>.+?)(?: \((?P<note>.*)\))?$")


def molecule_env(tmp_path) -> dict[str, str]:
    """This checkout's collection and tools; the fleet and molecule's own state in the test's temporary folder."""
    return dict(
        os.environ,
        PATH=f"{PYTHON.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv' / 'lib' / 'python3.11' / 'site-packages'}",
        ANSIBLE_HOST_KEY_CHECKING="False", NO_COLOR="1", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
        GPUFLEET_MOLECULE_WORKDIR=str(tmp_path / "fleets"),
        MOLECULE_EPHEMERAL_DIRECTORY=str(tmp_path / "ephemeral"),
    )


def actions(output: str) -> list[tuple[str, str]]:
    """(action, completion message) of each action molecule reports, in order."""
    found = []
    for line in ANSI.sub("", output).splitlines():
        match = ACTION.match(line.strip())
        if match:
            found.append((match["action"], match["message"]))
    return found


def listening(address: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((address, port)) == 0


@pytest.fixture
def short_tmp():
    """A folder with a short path: munged's socket (fleets/<scenario>/munge/munge.socket.2) must fit the 108 bytes of a
    Unix socket path, which pytest's tmp_path under pytest-xdist (.../popen-gw1/test_nvidia_driver_scenario_pa0/) does not."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gfmol-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_nvidia_driver_scenario_passes_its_whole_sequence(short_tmp, monkeypatch):
    tmp_path = short_tmp
    monkeypatch.chdir(REPO)  # molecule finds the collection (galaxy.yml) and extensions/molecule from its cwd
    proc = run([str(MOLECULE), "test", "-s", SCENARIO, "--report"], env=molecule_env(tmp_path), timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    report = actions(output)
    results = {}
    for action, message in report:
        results.setdefault(action, []).append(message)
    # The sequence of extensions/molecule/config.yml, each step run and successful (dependency is disabled: the
    # collection is this checkout).
    for action in ("syntax", "create", "converge", "idempotence", "check", "verify"):
        assert results.get(action) == ["Executed: Successful"], (action, report)
    assert results["destroy"] == ["Executed: Successful", "Executed: Successful"], report  # before create, and at the end
    order = [a for a, _m in report]
    assert order.index("converge") < order.index("idempotence") < order.index("check") < order.index("verify"), order
    # destroy took the fleet down: its workdir is gone and nothing listens on its addresses any more.
    assert not (tmp_path / "fleets" / SCENARIO).exists()
    assert not any(listening(a, 22) for a in NODE_ADDRESSES)
    assert not listening("127.0.0.1", SLURM_PORT)
