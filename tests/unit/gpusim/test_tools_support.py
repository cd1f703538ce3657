"""Helpers shared by the gpusim unit tests (no tests here): a node folder and a runner for the simulated tools."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
# Real captures beside the checkout (see tests/conftest.py); tests skip when absent.
REAL = TESTS.parent.parent / "shared" / "fixtures" / "real"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import state  # noqa: E402

BASE_SPEC = {
    "name": "gpu-a01", "sku": "hgx-h100", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True,
    "driver": "550.90.07", "kernel_module": "open", "fabricmanager": "550.90.07", "vbios": None,
    "gpu_firmware": None, "kernel": "5.15.0-119-generic", "faults": [], "timing": {}, "perf": {}, "jobs": 0,
    "nics": [{"type": "ConnectX-7", "psid": "MT_0000000838", "part_number": "MCX755106AS-HEA_Ax", "fw": "28.39.1002"}],
}


class SimNode:
    def __init__(self, path: Path, **spec):
        self.dir = path
        full = dict(BASE_SPEC)
        full.update(spec)
        state.save(path, state.new_node_state(full))
        self.bin = path / "testbin"
        self.bin.mkdir()
        wrapper = self.bin / "gpusim-run-installer"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpusim.tools gpusim-run-installer "$@"\n')
        wrapper.chmod(0o755)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(GPUSIM_NODE_DIR=str(self.dir), PYTHONPATH=str(TESTS), GPUSIM_NO_SLEEP="1",
                   GPUSIM_RUN_INSTALLER=str(self.bin / "gpusim-run-installer"), LC_ALL="C")
        return env

    def run(self, tool: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gpusim.tools", tool, *args], env=self.env(), input=stdin,
                              capture_output=True, text=True, timeout=60, check=False)

    def exec(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=60, check=False,
                              cwd=self.dir)

    @property
    def state(self) -> dict:
        return state.load(self.dir)

    def fault(self, kind: str, **params) -> None:
        state.update(self.dir, lambda s: state.apply_fault(s, kind, **params))


def node_factory(tmp_path: Path):
    """make_node(**spec) -> SimNode: a simulated node folder with its state (spec overrides BASE_SPEC)."""
    count = {"n": 0}

    def _make(**spec):
        count["n"] += 1
        d = tmp_path / f"node{count['n']}"
        d.mkdir()
        return SimNode(d, **spec)

    return _make
