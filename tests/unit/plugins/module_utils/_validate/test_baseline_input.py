"""A damaged baseline is a BaselineError naming the field, never a TypeError or a silent "no baseline"."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import baseline


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"snapshot": {}}, r"^baseline\.snapshot is empty"),
        ({"snapshot": {}, "measurements": {"busbw_gbps": 180.0}}, r"^baseline\.snapshot is empty"),
        ({"snapshot": {"snapshot": {}}}, r"^baseline\.snapshot is empty"),
        ({"snapshot": {"snapshot_version": 1}, "measurements": [180.0]}, r"^baseline\.measurements is a list, not a dict"),
        ({"snapshot_version": 1, "xid_counts": {"79x": 1}}, r"^baseline xid_counts must map Xid codes to counts"),
        ({"snapshot_version": 1, "xid_counts": [79]}, r"^baseline xid_counts must map Xid codes to counts"),
        ({"snapshot_version": 1, "xid_counts": {"79": None}}, r"^baseline xid_counts must map Xid codes to counts"),
    ],
    ids=["empty-snapshot", "empty-snapshot-with-busbw", "nested-empty", "measurements-list", "xid-key", "xid-list", "xid-count"],
)
def test_a_damaged_baseline_names_the_field(given, message):
    with pytest.raises(baseline.BaselineError, match=message):
        baseline.normalize(given)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, None),
        ({}, None),
        ({"snapshot_version": 1, "xid_counts": {"79": "2"}}, {"snapshot_version": 1, "xid_counts": {79: 2}}),
        ({"snapshot": {"snapshot_version": 1}, "measurements": {"busbw_gbps": 180.0}}, {"snapshot_version": 1, "xid_counts": {}, "busbw_gbps": 180.0}),
    ],
    ids=["none", "empty", "snapshot", "result"],
)
def test_the_accepted_forms_still_read(given, expected):
    assert baseline.normalize(given) == expected
