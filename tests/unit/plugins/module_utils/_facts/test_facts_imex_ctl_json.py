"""How gpu_facts asks nvidia-imex-ctl for the IMEX domain (_facts/nvlink.py): ``-N -j`` (JSON) from R580, ``-N`` before or
when an IMEX refuses ``-j``; read on the real gb200/imex captures (skipped with a reason where ../shared is absent)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import nvlink
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.imex import parse_ctl_nodes_json, parse_version

from tests.conftest import real_params


@pytest.mark.parametrize(("version", "args"), [
    ("580.95.05", ["-N", "-j"]),
    ("590.48.01", ["-N", "-j"]),
    ("580.159.04", ["-N", "-j"]),
    ("570.148.08", ["-N"]),
    ("570.00", ["-N"]),
    (None, ["-N"]),
    ("", ["-N"]),
    ("garbled", ["-N"]),
])
def test_imex_ctl_nodes_args(version, args):
    assert nvlink.imex_ctl_nodes_args(version) == args


@pytest.mark.parametrize("path", real_params("gb200/imex/nvidia-imex_--version_570.148.08_*"))
def test_an_imex_without_json_is_asked_with_n_alone(path):
    """The real 570.148.08 capture: its usage lists no -j, and its version gets -N; its usage text is read as a refusal."""
    text = path.read_text()
    assert nvlink.imex_ctl_nodes_args(parse_version(text)) == ["-N"]
    usage = text[text.index("Usage:"):]
    assert "-j" not in usage.split("\n", 1)[0]
    assert nvlink.imex_ctl_lacks_json("", usage) and nvlink.imex_ctl_lacks_json(usage, "")
    assert not nvlink.imex_ctl_lacks_json('{"nodes": {}, "status": "UP"}', "")


@pytest.mark.parametrize("path", real_params("gb200/imex/imex-ctl_N_j_JSON-shape_*"))
def test_the_real_json_shape_reads_with_its_key_names(path):
    """NVIDIA's abridged -N -j shape (key names only, ``{...}`` and ``...`` elided): made whole by dropping the elisions, it
    reads as a domain UP with node 0 READY on 580.95.05 (so asked with -j) and node 1 UNAVAILABLE."""
    text = path.read_text()
    whole = re.sub(r'"connections": \{\.\.\.\}, \.\.\.', '"connections": {}', text)
    domain = parse_ctl_nodes_json(whole)
    assert (domain["domain_state"], domain["domain_up"]) == ("UP", True)
    assert [(n["id"], n["address"], n["state"], n["version"]) for n in domain["nodes"]] == [
        (0, "10.0.0.1", "READY", "580.95.05"), (1, "10.0.0.2", "UNAVAILABLE", None)]
    assert nvlink.imex_ctl_nodes_args(domain["nodes"][0]["version"]) == ["-N", "-j"]
