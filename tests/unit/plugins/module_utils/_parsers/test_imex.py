"""Tests of the IMEX parsers (nvidia-imex --version, its log, nvidia-imex-ctl -N [-j], nodes_config.cfg)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.imex import (
    parse_ctl_nodes,
    parse_ctl_nodes_json,
    parse_log_version,
    parse_nodes_config,
    parse_version,
)

from tests.conftest import OWN, real_files, real_params

# What each real file under gb200/imex holds, read by hand: (--version, log version, -N (node count, versions, domain state),
# nodes_config.cfg addresses). None: the parser must refuse it (ParseError) or, for the log version, find none.
REAL = {
    "dpkg_nvidia-imex-570_570.86.15-1_file-list_gpu-driver-container-pr200.txt": (None, None, None, None),
    "imex-ctl_N_18nodes-UP_Version-570.172_p6e-gb200_aws-parallelcluster-doc.txt": (None, None, (18, ["570.172"], "UP"), None),
    "imex-ctl_N_j_JSON-shape_DOCSTRING-ABRIDGED_ai-cloud-validation.txt": (None, None, None, None),
    "imex-ctl_q+N+s_1node-UP_GH200-NVL_570.00_jpsnips-nv.txt": (None, None, (1, [], "UP"), None),
    "imex-daemon-log_1node_GH200-NVL_jpsnips-nv_TAIL.txt": (None, None, None, None),
    "imex-daemon-log_580.159.04_stderr-startup_hostname-nodes_dra-driver-pr1465_PARTIAL.txt": (None, "580.159.04", None, None),
    "imex-daemon-log_connection-retry-attempts_dra-driver-issue1050_PARTIAL.txt": (None, None, None, None),
    "imex-daemon-log_node0_IMEX-570.00_GH200-NVL_jpsnips-nv.txt": (None, "570.00", None, None),
    "imex-daemon-log_node1_IMEX-570.00_GH200-NVL_jpsnips-nv_TRUNCATED-LAST-LINE.txt": (None, "570.00", None, None),
    "nodes_config.cfg_2nodes+IMEX-version-570.124.06-logline_dra-driver-pr298_ELIDED.txt": (None, "570.124.06", None, None),
    "nodes_config.cfg_example_4-GB200-VMs_crusoe-docs.txt": (None, None, None, ["172.27.58.70", "172.27.58.71", "172.27.58.72", "172.27.58.73"]),
    "nvidia-imex_--version_570.148.08_+imex-ctl-usage_TRUNCATED_bottlerocket-kernel-kit-pr204.txt": ("570.148.08", None, None, None),
    "proc_devices_grep_nvidia_imex-channels-major_ANNOTATED_nvidia-modprobe-issue9.txt": (None, None, None, None),
}


def _read(path):
    return path.read_text(encoding="utf-8", errors="replace")


def test_every_real_file_is_known():
    files = real_files("gb200/imex/*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert {path.name for path in files} == set(REAL)


@pytest.mark.parametrize("path", real_params("gb200/imex/*"))
def test_real_version(path):
    expected = REAL[path.name][0]
    if expected is None:
        with pytest.raises(ParseError, match="nvidia-imex --version"):
            parse_version(_read(path))
    else:
        assert parse_version(_read(path)) == expected


@pytest.mark.parametrize("path", real_params("gb200/imex/*"))
def test_real_log_version(path):
    expected = REAL[path.name][1]
    result = parse_log_version(_read(path))
    assert (result or {}).get("version") == expected


@pytest.mark.parametrize("path", real_params("gb200/imex/*"))
def test_real_ctl_nodes(path):
    expected = REAL[path.name][2]
    if expected is None:
        with pytest.raises(ParseError, match="nvidia-imex-ctl -N"):
            parse_ctl_nodes(_read(path))
        return
    count, versions, state = expected
    result = parse_ctl_nodes(_read(path))
    assert (len(result["nodes"]), result["versions"], result["domain_state"], result["domain_up"]) == (count, versions, state, True)
    assert {node["state"] for node in result["nodes"]} == {"READY"}
    assert all(set(row.values()) == {"connected"} and len(row) == count for row in result["connectivity"].values())
    assert not result["version_mismatch"] and not result["node_map_mismatch"]


@pytest.mark.parametrize("path", real_params("gb200/imex/*"))
def test_real_ctl_nodes_json(path):
    # The only -j file is NVIDIA's abridged docstring ("{...}"): a clear error, never a partial domain.
    with pytest.raises(ParseError, match="nvidia-imex-ctl -N -j"):
        parse_ctl_nodes_json(_read(path))


@pytest.mark.parametrize("path", real_params("gb200/imex/*"))
def test_real_nodes_config(path):
    expected = REAL[path.name][3]
    if expected is None:
        with pytest.raises(ParseError, match=r"nodes_config\.cfg"):
            parse_nodes_config(_read(path))
    else:
        assert parse_nodes_config(_read(path)) == expected


def test_elided_nodes_config_lines_read_alone():
    """The prod example echoes the file's two lines after its name: those lines are a valid file."""
    files = real_files("gb200/imex/nodes_config.cfg_2nodes+*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    lines = _read(files[0]).splitlines()
    assert parse_nodes_config("\n".join(lines[1:3]) + "\n") == ["10.115.131.13", "10.115.131.6"]


def test_real_node_addresses_and_ids():
    files = real_files("gb200/imex/imex-ctl_N_18nodes*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    nodes = parse_ctl_nodes(_read(files[0]))["nodes"]
    assert [node["id"] for node in nodes] == list(range(18))
    assert (nodes[0]["address"], nodes[17]["address"]) == ("172.31.48.81", "172.31.56.47")


def test_own_version_mismatch_domain():
    result = parse_ctl_nodes((OWN / "imex" / "imex-ctl_N_4nodes_one-version-off_DOWN.txt").read_text())
    assert result["domain_state"] == "DOWN" and not result["domain_up"]
    assert result["version_mismatch"] and not result["node_map_mismatch"]
    assert result["versions"] == ["580.82", "580.95"]
    assert result["connectivity"][3] == {0: "version_mismatch", 1: "version_mismatch", 2: "version_mismatch", 3: "connected"}


def test_own_json_domain():
    result = parse_ctl_nodes_json((OWN / "imex" / "imex-ctl_N_j_2nodes_DOWN.json").read_text())
    assert result["domain_state"] == "DOWN"
    assert result["nodes"] == [
        {"id": 0, "address": "10.0.0.1", "state": "READY", "version": "580.95.05"},
        {"id": 1, "address": "10.0.0.2", "state": "UNAVAILABLE", "version": None},
    ]
    assert result["connectivity"] == {0: {0: "connected", 1: "invalid"}, 1: {}}


def test_own_nodes_config_with_comment_and_host_name():
    assert parse_nodes_config((OWN / "imex" / "nodes_config.cfg_2nodes_with-comment.txt").read_text()) == ["10.0.0.1", "tray-02.example"]


LEGEND_NEW = "!V! - Version mismatch, communication disabled.\nC - Connected - Ready for operation\n\n"
TWO = "Nodes:\nNode #0   - 10.0.0.1   - READY   - Version: 580.95\nNode #1   - 10.0.0.2   - READY   - Version: 580.95\n\n"
TABLE = " Nodes From\\To  0   1\n       0        C   C\n       1        C   C\n\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (LEGEND_NEW + TWO + TABLE, "Domain State"),  # cut before the domain state
        (LEGEND_NEW + TWO + TABLE + "Domain State: U", "Domain State"),  # cut inside it
        (LEGEND_NEW + TWO + " Nodes From\\To  0   1\n       0        C   C\n\nDomain State: UP\n", "connectivity table"),  # a row missing
        (LEGEND_NEW + TWO + " Nodes From\\To  0   1\n       0        C\n       1        C   C\nDomain State: UP\n", "connectivity row"),
        (LEGEND_NEW + TWO + " Nodes From\\To  0   1\n       0        C   X\n       1        C   C\nDomain State: UP\n", "connectivity mark"),
        (LEGEND_NEW + "Nodes:\nNode #0 - 10.0.0.1 - READY - Version: 580.9\n" + TABLE + "Domain State: UP\n", "version"),
        (LEGEND_NEW + "Nodes:\nNode #0 - 10.0.0.1\n" + TABLE + "Domain State: UP\n", "node line"),
        (LEGEND_NEW + TABLE + "Domain State: UP\n", "Nodes:"),
    ],
)
def test_ctl_nodes_garbled_is_an_error_naming_the_field(text, field):
    with pytest.raises(ParseError, match=re.escape(field)):
        parse_ctl_nodes(text)


def test_ctl_nodes_whole_two_nodes():
    result = parse_ctl_nodes(LEGEND_NEW + TWO + TABLE + "Domain State: UP\n")
    assert result["domain_up"] and result["versions"] == ["580.95"]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"nodes": {}, "status": "UP"}', "nodes is empty"),
        ('{"nodes": {"0": {"status": "READY", "host": "a", "connections": {}}}}', "document.status"),
        ('{"nodes": {"0": {"status": 1, "host": "a", "connections": {}}}, "status": "UP"}', "nodes.0.status"),
        ('{"nodes": {"0": {"status": "READY", "host": "a", "connections": {}, "version": "580.9"}}, "status": "UP"}', "version"),
        ('{"nodes": {"0": {"status": "READY", "host": "a", "connections": {"0": {"status": "WHAT"}}}}, "status": "UP"}', "connections.0"),
        ('{"nodes": [], "status": "UP"}', "document.nodes"),
    ],
)
def test_ctl_nodes_json_garbled(text, field):
    with pytest.raises(ParseError, match=re.escape(field)):
        parse_ctl_nodes_json(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("IMEX version is: 570.148.08\n", "570.148.08"),
        ("IMEX version is: 580.95.05", "580.95.05"),  # three parts: whole even without the newline
    ],
)
def test_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["IMEX version is: 570.148", "IMEX version is: 570.148.0", "IMEX version is: \n", "IMEX version is: abc\n"])
def test_version_cut_or_garbled(text):
    with pytest.raises(ParseError, match="nvidia-imex --version: version"):
        parse_version(text)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("10.0.0.1\n10.0.0.", "cut short"),
        ("10.0.0.1\n10.0.0.1\n", "repeats"),
        ("\n# only a comment\n", "no node address"),
        ("10.0.0.1 10.0.0.2\n", "line 1"),
        ("10.0.0.1\n/etc/nvidia-imex/nodes_config.cfg:\n", "line 2"),
    ],
)
def test_nodes_config_bad(text, field):
    with pytest.raises(ParseError, match=re.escape(field)):
        parse_nodes_config(text)


def test_log_version_takes_the_last_start_and_not_a_cut_line():
    log = "[x] IMEX version 570.124.06 is running with\n[y] IMEX version 580.95.05 is running with\n[z] IMEX version 590.48.01 is run"
    assert parse_log_version(log) == {"version": "580.95.05"}
