"""The preflight's verdict on a node (plugins/module_utils/_rollout/node_start.py, filter rollout_node_start): settled,
resuming, busy, held by someone else, unhealthy, skipped, and the node's result so far. Each case is one row."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter import rollout_node_start as filters
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import node_start

ID, NONCE, NAME = "r-1", "n-this", "gpu-01"
PRE = {"name": "preflight", "status": "ok"}
DRAIN = {"name": "drain", "status": "started"}
PERSON = {"node": NAME, "state": "IDLE+DRAIN", "reason": "admin: fan 3", "ours": False}
OURS = {"node": NAME, "state": "IDLE+DRAIN", "reason": "gpufleet r-1", "ours": True}
OTHER_NODE = {"node": "gpu-02", "state": "DOWN", "reason": "dead", "ours": False}
HEALTHY = {"checks": [{"name": "xid", "status": "pass", "message": "none"}]}
SICK = {"checks": [{"name": "xid", "status": "fail", "message": "Xid 79"}, {"name": "ecc", "status": "fail", "message": "DBE 2"},
                   {"name": "pcie", "status": "warn", "message": "x8"}]}


def read(rid=ID, status="running", result=None, phases=(), run=NONCE, held_by="ctl", stale=False):
    return {"rollout": {"id": rid, "status": status, "result": result, "phases": list(phases), "run": run},
            "lock": {"held_by": held_by, "stale": stale}}


CASES = [
    # read, unavailable, baseline, expected (only the keys named)
    ({"rollout": None, "lock": None}, [], None,
     {"done": False, "resuming": False, "prior_result": "", "busy": False, "held": {}, "skipped": False, "result": "not_started"}),
    ({}, None, None, {"done": False, "resuming": False, "busy": False, "result": "not_started"}),  # a node never rolled out
    (read(status="done", result="upgraded", held_by=None), [], None,
     {"done": True, "prior_result": "upgraded", "result": "upgraded", "resuming": False, "busy": False}),
    (read(status="done", result="rolled_back", held_by=None), [], None, {"done": True, "result": "rolled_back"}),
    # another rollout finished it: not settled for this one, its result is not ours
    (read(rid="r-0", status="done", result="upgraded", held_by=None), [], None, {"done": False, "prior_result": "", "result": "not_started"}),
    (read(phases=[PRE, DRAIN]), [], None, {"resuming": True, "done": False, "result": "not_started"}),  # killed mid-node
    (read(phases=[PRE]), [], None, {"resuming": False}),  # killed after its preflight only: starts afresh
    (read(rid="r-0", phases=[PRE, DRAIN]), [], None, {"resuming": False}),  # another rollout's run
    # busy: a live lock of another run (another nonce), not stale
    (read(run="n-other"), [], None, {"busy": True}),
    (read(run="n-other", stale=True), [], None, {"busy": False}),
    (read(run=NONCE), [], None, {"busy": False}),
    (read(run=None), [], None, {"busy": True}),  # a lock without a run nonce is not this run's
    (read(held_by=None, run="n-other"), [], None, {"busy": False}),
    # held by someone else: skipped, never touched; our own drain (an interrupted run's) is not someone else's
    (read(held_by=None), [PERSON, OTHER_NODE], None,
     {"held": PERSON, "skipped": True, "result": "skipped", "skip_reason": "out of service for someone else: IDLE+DRAIN admin: fan 3"}),
    (read(held_by=None), [OURS, OTHER_NODE], None, {"held": {}, "skipped": False, "result": "not_started"}),
    # unhealthy before the change: the failed checks only, in order
    (read(held_by=None), [], SICK, {"skipped": True, "result": "skipped",
                                    "skip_reason": "unhealthy before the change: xid: Xid 79; ecc: DBE 2"}),
    (read(held_by=None), [], HEALTHY, {"skipped": False, "skip_reason": ""}),
    (read(held_by=None), [], {"skipped": True, "changed": False}, {"skipped": False}),  # the health check did not run
    (read(held_by=None), [], {"failed": True, "msg": "nvidia-smi: not found"},  # the module failed: one failed check
     {"skip_reason": "unhealthy before the change: gpu_validate: nvidia-smi: not found"}),
    (read(held_by=None), [], {"failed": True}, {"skip_reason": "unhealthy before the change: gpu_validate: no result"}),
    # someone else's hold is said first; a settled node keeps its result even when skipped now
    (read(held_by=None), [PERSON], SICK, {"skip_reason": "out of service for someone else: IDLE+DRAIN admin: fan 3"}),
    (read(status="done", result="upgraded", held_by=None), [PERSON], None, {"done": True, "skipped": True, "result": "upgraded"}),
]


@pytest.mark.parametrize(("the_read", "unavailable", "baseline", "expected"), CASES)
def test_node_start(the_read, unavailable, baseline, expected):
    got = node_start.node_start(the_read, ID, NONCE, NAME, unavailable, baseline)
    assert {k: got[k] for k in expected} == expected, got
    assert filters.rollout_node_start(the_read, ID, NONCE, NAME, unavailable, baseline) == got
    assert set(got) == {"done", "resuming", "prior_result", "busy", "held", "skip_reason", "skipped", "result"}


BAD = [
    # read, unavailable, baseline, words of the message
    ("not a read", [], None, "read must be a mapping"),
    ({"rollout": ["x"]}, [], None, "read.rollout must be a mapping"),
    ({}, "gpu-01", None, "unavailable must be a list"),
    ({}, ["gpu-01"], None, "each entry of unavailable must be a mapping"),
    ({}, [], ["x"], "baseline must be a mapping"),
]


@pytest.mark.parametrize(("the_read", "unavailable", "baseline", "words"), BAD)
def test_bad_input_is_refused_naming_what(the_read, unavailable, baseline, words):
    with pytest.raises(node_start.NodeStartError, match=words):
        node_start.node_start(the_read, ID, NONCE, NAME, unavailable, baseline)
    with pytest.raises(AnsibleFilterError, match="gpufleet.lifecycle.rollout_node_start: " + words):
        filters.rollout_node_start(the_read, ID, NONCE, NAME, unavailable, baseline)


def test_the_filter_is_registered():
    assert filters.FilterModule().filters()["rollout_node_start"] is filters.rollout_node_start
