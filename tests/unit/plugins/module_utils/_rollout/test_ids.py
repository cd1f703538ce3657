"""One rollout id rule and one message, in every module and filter that takes a rollout id."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance import kubernetes as _k8s
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance import slurm as _slurm
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import capacity as _capacity
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import lock as _lock
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.ids import rollout_id_problem

BAD = ["r 1", "r1\n", "", "r:1", "x" * 65, "r\x1b[31m", 5, ["r-1"]]
GOOD = ["r-1", "r-3f2a9c01de", "rb-0123456789", "A.b_c-9", "x" * 64]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("r-1", None),
        ("x" * 64, None),
        ("r 1", "rollout_id 'r 1' may hold only letters, digits, '.', '_' and '-' (1 to 64)"),
        ("r1\n", "rollout_id 'r1\\n' may hold only letters, digits, '.', '_' and '-' (1 to 64)"),
        ("x" * 81, "rollout_id of 81 characters may hold only letters, digits, '.', '_' and '-' (1 to 64)"),
        (5, "rollout_id of type int may hold only letters, digits, '.', '_' and '-' (1 to 64)"),
        (None, "rollout_id of type NoneType may hold only letters, digits, '.', '_' and '-' (1 to 64)"),
    ],
)
def test_the_rule_and_its_message(value, expected):
    assert rollout_id_problem(value) == expected


def test_none_is_fine_where_the_id_is_optional():
    assert rollout_id_problem(None, required=False) is None


def _rollout_state(value):
    _lock.check_params({"rollout_id": value, "action": "read"})


def _slurm_capacity(value):
    _capacity.check_params({"pool": ["gpu-01"], "admit": [], "max_unavailable": 1, "rollout_id": value, "owner_tag": "gpufleet"})


def _slurm_node(value):
    _slurm.check_params({"node": "gpu-01", "state": "drained", "rollout_id": value, "owner_tag": "gpufleet", "reason": "x"})


def _k8s_cordon(value):
    _k8s.cordon_plan({"metadata": {"name": "gpu-01"}, "spec": {}}, value)


CHECKERS = [_rollout_state, _slurm_capacity, _slurm_node, _k8s_cordon]


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_every_module_refuses_a_bad_id_with_the_one_message(checker, value):
    with pytest.raises(GpufleetError) as caught:
        checker(value)
    assert str(caught.value.msg) == rollout_id_problem(value)


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("value", GOOD)
def test_every_module_takes_a_good_id(checker, value):
    try:
        checker(value)
    except GpufleetError as exc:
        assert "rollout_id" not in exc.msg, exc.msg
