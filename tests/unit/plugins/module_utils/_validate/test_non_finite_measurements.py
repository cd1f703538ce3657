"""Issue 21: a measurement of NaN or infinity (from an earlier result, a baseline, /proc/uptime) is refused, never compared.

NaN compares false with every floor: a NaN baseline bandwidth passes any NCCL figure, a NaN straggler is never flagged.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import baseline, levels
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stragglers import StragglerError, find_stragglers

NON_FINITE = (float("nan"), float("inf"), float("-inf"), float("1e999"))
SNAPSHOT = {"snapshot_version": 1, "boot_id": "b", "gpus": [], "xid_counts": {}}


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_straggler_measurement_that_is_not_finite_is_refused_naming_node_and_metric(value):
    nodes = {"a": {"busbw_gbps": 400.0}, "b": {"busbw_gbps": 398.0}, "c": {"busbw_gbps": value}}
    with pytest.raises(StragglerError, match=r"node 'c': busbw_gbps is .*not a finite measurement"):
        find_stragglers(nodes)


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    "form",
    [
        lambda value: dict(SNAPSHOT, busbw_gbps=value),
        lambda value: {"snapshot": dict(SNAPSHOT), "measurements": {"busbw_gbps": value}},
    ],
    ids=["snapshot", "gpu_validate-result"],
)
def test_a_baseline_bandwidth_that_is_not_finite_is_refused(form, value):
    with pytest.raises(baseline.BaselineError, match=r"baseline busbw_gbps is .*not a finite bandwidth in GB/s"):
        baseline.normalize(form(value))


@pytest.mark.parametrize(("value", "shown"), [("fast", "a str"), (True, "True"), (-1.0, "-1.0")])
def test_a_baseline_bandwidth_of_another_kind_is_refused_without_its_text(value, shown):
    with pytest.raises(baseline.BaselineError, match=rf"baseline busbw_gbps is {shown}, "):
        baseline.normalize(dict(SNAPSHOT, busbw_gbps=value))


def test_a_finite_baseline_bandwidth_still_gives_a_floor():
    assert baseline.busbw_floor(baseline.normalize(dict(SNAPSHOT, busbw_gbps=400)), 10) == 360.0


class _Host:
    def __init__(self, text):
        self.text = text

    def read(self, _path):
        return self.text


@pytest.mark.parametrize(("text", "known"), [("nan 12.0\n", False), ("inf 1.0\n", False), ("1e999 1\n", False), ("123.45 99.0\n", True)])
def test_boot_time_from_an_uptime_that_is_not_finite_is_unknown(text, known):
    assert (levels.boot_time(_Host(text)) is not None) is known
