"""The nvidia_driver role's NVL72 filters: errors name the filter and the variable, the texts the role writes (issue 23)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter import nvidia_driver_imex as f

HOSTVARS = {"a1": {"nvlink_domain": "rack-a", "ansible_host": "10.0.0.1"}, "a2": {"nvlink_domain": "rack-a", "ansible_host": "10.0.0.2"},
            "b1": {"nvlink_domain": "rack-b", "ansible_host": "10.0.1.1"}}


def test_filters_are_registered():
    assert set(f.FilterModule().filters()) == {"imex_domain_nodes", "imex_nodes_config", "driver_modprobe_options",
                                               "driver_param_problems", "imex_verify_problems"}


def test_domain_nodes_and_nodes_config():
    nodes = f.imex_domain_nodes(HOSTVARS, ["a1", "b1", "a2"], "rack-a")
    assert nodes == ["10.0.0.1", "10.0.0.2"]
    assert f.imex_nodes_config(nodes) == "10.0.0.1\n10.0.0.2\n"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: f.imex_domain_nodes(HOSTVARS, ["a1"], ""), r"gpufleet\.lifecycle\.imex_domain_nodes: nvlink_domain is not set"),
        (lambda: f.imex_domain_nodes("not hostvars", ["a1"], "rack-a"), "the input must be hostvars"),
        (lambda: f.imex_nodes_config([]), r"gpufleet\.lifecycle\.imex_nodes_config: nvidia_driver_imex_nodes is empty"),
        (lambda: f.driver_modprobe_options("570.172.08", True), r"gpufleet\.lifecycle\.driver_modprobe_options: nvidia_driver_cdmm is on"),
        (lambda: f.driver_param_problems("CoherentGPUMemoryMode: \"driv", "580.95.05", True), r"gpufleet\.lifecycle\.driver_param_problems"),
    ],
)
def test_errors_name_the_filter(call, match):
    with pytest.raises(AnsibleFilterError, match=match):
        call()


def test_modprobe_options_and_read_back():
    assert f.driver_modprobe_options("580.95.05") == ""
    text = f.driver_modprobe_options("580.95.05", True)
    assert text.endswith("options nvidia NVreg_CoherentGPUMemoryMode=driver\n")
    assert f.driver_param_problems('ResmanDebugLevel: 4294967295\nCoherentGPUMemoryMode: "driver"', "580.95.05", True) == []
    assert f.driver_param_problems("ResmanDebugLevel: 4294967295\n", "580.95.05", True) != []
    assert f.driver_param_problems("anything", "580.95.05") == []  # nothing set, nothing to read back


def test_verify_problems_on_missing_facts():
    problems = f.imex_verify_problems(None, "590.48.01", ["10.0.0.1"])
    assert [p["check"] for p in problems] == ["imex_version"]
