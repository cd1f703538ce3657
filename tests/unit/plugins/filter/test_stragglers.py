"""The stragglers filter: nodes more than a tolerance below the fleet median."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.stragglers import FilterModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stragglers import median

stragglers = FilterModule().filters()["stragglers"]


def result(busbw, gflops):
    return {"status": "pass", "checks": [], "measurements": {"busbw_gbps": busbw, "gflops_min": gflops, "gflops": [gflops]}}


FLEET = {
    "gpu-01": result(360.0, 41200.0),
    "gpu-02": result(358.0, 41100.0),
    "gpu-03": result(361.0, 22600.0),  # one GPU in thermal slowdown
    "gpu-04": result(300.0, 41150.0),  # slow fabric
    "gpu-05": result(359.0, 41180.0),
}


def test_flags_the_thermal_and_the_bandwidth_straggler():
    flags = stragglers(FLEET, tolerance_pct=10)
    assert [(f["name"], f["metric"]) for f in flags] == [("gpu-03", "gflops_min"), ("gpu-04", "busbw_gbps")]
    thermal = flags[0]
    assert thermal["value"] == 22600.0
    assert thermal["median"] == 41150.0
    assert thermal["deficit_pct"] == pytest.approx(45.1, abs=0.05)
    assert thermal["tolerance_pct"] == 10.0
    assert flags[1]["median"] == 359.0


def test_tolerance_decides():
    assert [f["name"] for f in stragglers(FLEET, tolerance_pct=20)] == ["gpu-03"]
    assert stragglers(FLEET, tolerance_pct=50) == []


def test_list_input_metrics_and_missing_values():
    nodes = [{"name": name, "measurements": r["measurements"]} for name, r in FLEET.items()]
    nodes.append({"name": "gpu-06", "measurements": {"busbw_gbps": None, "gflops_min": None}})  # quick level: nothing measured
    assert [f["name"] for f in stragglers(nodes, metrics=["busbw_gbps"])] == ["gpu-04"]


def test_too_few_nodes_are_not_judged():
    two = {"a": result(100.0, 1.0), "b": result(400.0, 4.0)}
    assert stragglers(two) == []
    assert [f["name"] for f in stragglers(two, min_nodes=2, tolerance_pct=10)] == ["a", "a"]


def test_median():
    assert median([3, 1, 2]) == 2.0
    assert median([4, 1, 3, 2]) == 2.5


@pytest.mark.parametrize("bad,message", [
    ("not nodes", "expected a dict or list"),
    ([{"measurements": {}}], "needs a 'name'"),
])
def test_bad_input_names_the_filter(bad, message):
    with pytest.raises(AnsibleFilterError, match=f"gpufleet.lifecycle.stragglers: .*{message}"):
        stragglers(bad)


def test_bad_tolerance():
    with pytest.raises(AnsibleFilterError, match="tolerance_pct must be between 0 and 100"):
        stragglers(FLEET, tolerance_pct=150)
