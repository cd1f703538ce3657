"""A simulated tool's start-up: what its wrapper runs, and what it imports.

The simulated fleet's tools run on the same cores as the controller (an 8-node rollout starts about 550 of them), so
their start-up is the suite's time: the wrapper runs Python without site, runpy or PYTHON* variables, and the tools
import no module the standard library makes them pay for at start-up (dataclasses, typing, inspect...)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gpusim import node as gnode
from gpusim.tools import TOOLS
from test_tools_support import TESTS, node_factory

# Modules a tool's start-up does without: each cost a tool 2-11 ms (measured with python -X importtime).
HEAVY = ("dataclasses", "inspect", "typing", "runpy", "site", "xml.sax.saxutils", "urllib.request", "uuid", "shutil")

make_node = pytest.fixture(node_factory)


@pytest.mark.parametrize("module", sorted({target.split(":")[0] for target in TOOLS.values()}))
def test_a_tool_module_imports_nothing_heavy_at_start_up(module):
    code = (f"import sys; sys.path.insert(0, sys.argv.pop(1)); import gpusim.tools.{module}; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(TESTS)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def wrapper(tmp_path, name: str, aliases: tuple[str, ...] = ()) -> str:
    path = tmp_path / name
    path.write_text(gnode.wrapper_text(name, sys.executable, str(TESTS), aliases))
    path.chmod(0o755)
    return str(path)


def test_the_wrapper_runs_the_tool_with_its_arguments_and_exit_code(make_node, tmp_path):
    sim = make_node(gpu_count=2)
    # PYTHON* variables of the caller do not reach the tool (-I): a PYTHONPATH without the simulator changes nothing.
    env = dict(sim.env(), PYTHONPATH="/nonexistent", PYTHONSTARTUP="/nonexistent")
    done = subprocess.run([wrapper(tmp_path, "nvidia-smi"), "-L"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["GPU 0", "GPU 1"]
    done = subprocess.run([wrapper(tmp_path, "nvidia-smi"), "--no-such-flag"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "Invalid combination of input arguments" in done.stdout + done.stderr


def test_the_wrapper_runs_python_without_site_and_isolated(tmp_path):
    text = gnode.wrapper_text("dmesg", "/usr/bin/python3", "/srv/tests")
    exec_line = text.splitlines()[-1]
    assert exec_line.startswith("exec /usr/bin/python3 -I -S -c ")
    assert exec_line.endswith(' /srv/tests "$tool" "$@"')
