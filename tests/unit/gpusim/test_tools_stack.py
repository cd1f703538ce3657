"""The simulated stack tools (ofed_info, ibstat, mokutil, dkms, nv-hostengine, dcgmi --version) print what the
project's parsers read on the real captures, from the node state's ``stack`` (issue 24); without it they are absent."""

from __future__ import annotations

import pytest
from gpusim import catalog
from gpusim import state as st
from test_tools_support import node_factory


def _parsers(name):
    return pytest.importorskip(f"ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.{name}")


SHA1 = "76a092065800bf376901c372cd55a90e1fded2e0"
STACK = {
    "ofed": {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200"},
    "ports": [
        {"device": "mlx5_0", "rate": 400},
        {"device": "mlx5_1", "state": "Down", "physical_state": "Polling"},
        {"device": "mlx5_2", "rate": 200},
    ],
    "secure_boot": {"enabled": True, "keys": [{"sha1": SHA1, "cn": "DKMS module signing key"}]},
    "dkms": {"kernel": "5.15.0-100-generic"},
}


@pytest.fixture
def node(tmp_path):
    made = node_factory(tmp_path)()
    st.update(made.dir, lambda s: s.__setitem__("stack", STACK))
    return made


def test_stack_tools_print_what_the_parsers_read(node):
    ofed, infiniband, secureboot, dkms, dcgm_version = (_parsers(n) for n in ("ofed", "infiniband", "secureboot", "dkms", "dcgm_version"))
    assert ofed.parse_ofed_info(node.run("ofed_info", "-s").stdout) == {
        "flavor": "doca-ofed",
        "version": "24.10-1.1.4.0.200",
        "release": "OFED-internal-24.10-1.1.4.0.200",
    }
    ports = infiniband.parse_ibstat(node.run("ibstat").stdout)["ports"]
    # A port Down/Polling: ibstat prints Rate: 10 for it, which is never read as its rate.
    assert [(p["device"], p["state"], p["physical_state"], p["rate_gbps"]) for p in ports] == [
        ("mlx5_0", "Active", "LinkUp", 400),
        ("mlx5_1", "Down", "Polling", None),
        ("mlx5_2", "Active", "LinkUp", 200),
    ]
    sb = node.run("mokutil", "--sb-state")
    assert (sb.returncode, secureboot.parse_sb_state(sb.stdout)["state"]) == (0, "enabled")
    assert secureboot.parse_list_enrolled(node.run("mokutil", "--list-enrolled").stdout) == [{"sha1": SHA1, "cn": "DKMS module signing key"}]
    status = dkms.parse_status(node.run("dkms", "status").stdout)
    assert dkms.kernels_of(status, "nvidia") == {"installed": ["5.15.0-100-generic"], "versions": ["550.90.07"]}
    assert dcgm_version.parse_dcgmi_version(node.run("dcgmi", "--version").stdout) == catalog.DCGM_VERSION
    assert dcgm_version.parse_build_info(node.run("nv-hostengine", "--version").stdout)["hostengine"]["version"] == catalog.DCGM_VERSION


@pytest.mark.parametrize("tool", ["ofed_info", "ibstat", "mokutil", "dkms"])
def test_without_a_stack_each_tool_is_not_installed(tmp_path, tool):
    result = node_factory(tmp_path)().run(tool, "-s" if tool == "ofed_info" else "status")
    assert result.returncode == 127 and "command not found" in result.stderr
    assert _parsers("infiniband").command_missing(result.stderr)
