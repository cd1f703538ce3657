"""Straggler detection: the arguments it refuses (with the filter's full name), so that a typo never passes as "no straggler"."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.stragglers import stragglers
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stragglers import StragglerError, find_stragglers

NODES = {"a": {"busbw_gbps": 400.0}, "b": {"busbw_gbps": 398.0}, "c": {"busbw_gbps": 300.0}}


def test_the_slow_node_is_flagged():
    assert [(f["name"], f["metric"]) for f in find_stragglers(NODES)] == [("c", "busbw_gbps")]


def test_metrics_given_as_one_string_is_refused_not_read_as_letters():
    # The filter used to turn "busbw_gbps" into the metrics ("b", "u", "s", ...): nothing measured, nobody flagged.
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.lifecycle.stragglers: metrics must be a list of measurement names"):
        stragglers(NODES, metrics="busbw_gbps")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"min_nodes": "three"}, r"min_nodes must be a whole number of nodes from 2 up, not 'three'"),
        ({"min_nodes": 1}, r"min_nodes must be a whole number of nodes from 2 up, not 1"),
        ({"min_nodes": True}, r"min_nodes must be a whole number of nodes from 2 up, not True"),
        ({"metrics": ["busbw_gbps", ""]}, r"metrics must be a list of measurement names \(busbw_gbps, gflops_min\), not \['busbw_gbps', ''\]"),
        ({"metrics": [3]}, r"metrics must be a list of measurement names"),
        ({"tolerance_pct": float("nan")}, r"tolerance_pct must be between 0 and 100, not nan"),
        ({"tolerance_pct": True}, r"tolerance_pct must be a number, not True"),
    ],
)
def test_bad_arguments_are_refused_with_the_filter_name(kwargs, expected):
    with pytest.raises(StragglerError, match=expected):
        find_stragglers(NODES, **kwargs)
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.lifecycle.stragglers: " + expected):
        stragglers(NODES, **kwargs)


def test_a_node_given_twice_is_refused_not_hidden_behind_its_other_run():
    # Keeping the last of two entries hid the slow run of gpu-03 behind its fast one.
    nodes = [{"name": "gpu-01", "measurements": {"busbw_gbps": 400.0}}, {"name": "gpu-02", "measurements": {"busbw_gbps": 398.0}},
             {"name": "gpu-03", "measurements": {"busbw_gbps": 200.0}}, {"name": "gpu-03", "measurements": {"busbw_gbps": 399.0}}]
    with pytest.raises(StragglerError, match=r"nodes\[3\]: node 'gpu-03' is given twice \(also nodes\[2\]\): give each node once"):
        find_stragglers(nodes)
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.lifecycle.stragglers: nodes\[3\]: node 'gpu-03' is given twice"):
        stragglers(nodes)
