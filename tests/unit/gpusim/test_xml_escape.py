"""gpusim's own XML escaping (tools/_xml.py) gives the text xml.sax.saxutils gives: the simulated nvidia-smi -q -x and
mlxfwmanager --query-format XML print what they printed with saxutils, at a fraction of its import time."""

from __future__ import annotations

import importlib
import itertools
import subprocess
import sys
from xml.sax import saxutils

import pytest
from test_tools_support import TESTS  # it puts tests/ on sys.path

_xml = importlib.import_module("gpusim.tools._xml")

PIECES = ["", "a", "&", "<", ">", '"', "'", "\n", "\r", "\t", "&amp;", "]]>", "é", " "]
SAMPLES = ["".join(p) for p in itertools.product(PIECES, repeat=3)]


@pytest.mark.parametrize("function", ["escape", "quoteattr"])
def test_the_same_text_as_saxutils(function):
    ours, theirs = getattr(_xml, function), getattr(saxutils, function)
    different = [(s, ours(s), theirs(s)) for s in SAMPLES if ours(s) != theirs(s)]
    assert not different, different[:5]


def test_a_simulated_tool_does_not_import_saxutils():
    """The point of tools/_xml.py: a simulated tool's start-up leaves xml.sax and urllib.request out."""
    code = ("import sys; import gpusim.tools.nvsmi, gpusim.tools.mlx; "
            "print(sorted(m for m in ('xml.sax.saxutils', 'urllib.request', 'uuid', 'shutil', 'hashlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(TESTS)}, capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
