"""gpu_validate's guard: the checks that load the GPUs (standard, full) are refused on a node that runs compute processes
or is not known to be drained, naming the node, what runs there and what to do."""

from __future__ import annotations

import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.guard import NodeInUseError, load_refusal, slurm_drain

SLURM = pathlib.Path(__file__).resolve().parents[4] / "fixtures" / "slurm"
JOB = {"pid": 41234, "name": "python3", "type": "C", "gpu_index": 1}
DISPLAY = {"pid": 1200, "name": "/usr/lib/xorg/Xorg", "type": "G", "gpu_index": 0}
LOAD = ["cuda_smoke", "dcgm_diag"]


@pytest.mark.parametrize(
    ("load_checks", "processes", "drained", "state", "refused"),
    [
        ([], [JOB], None, None, None),  # quick: read-only, runs anywhere
        ([], [], False, "MIXED", None),
        (LOAD, [], True, None, None),  # drained, idle: runs
        (LOAD, None, True, None, None),  # nvidia-smi could not tell: the checks fail on their own
        (LOAD, [DISPLAY], True, None, None),  # a display server only draws
        (LOAD, [JOB], True, None, "gpu-07: 1 compute process(es) run on its GPUs (pid 41234 python3 on GPU 1)"),
        (LOAD, [dict(JOB, type="C+G")], True, None, "1 compute process(es)"),
        (LOAD, [dict(JOB, type=None)], True, None, "1 compute process(es)"),  # unknown type: computing
        (LOAD, [JOB, DISPLAY], False, "MIXED", "1 compute process(es)"),  # the processes are named first
        (LOAD, [], False, None, "gpu-07: it is not drained; cuda_smoke, dcgm_diag load every GPU"),
        (LOAD, [], None, None, "gpu-07: whether it is drained is not known"),
        (LOAD, [], False, "MIXED+DRAIN", "gpu-07: Slurm shows it MIXED+DRAIN, not drained with no job left"),
        (["gpu_burn"], [], False, "IDLE", "Slurm shows it IDLE"),
    ],
)
def test_load_refusal(load_checks, processes, drained, state, refused):
    message = load_refusal("gpu-07", load_checks, processes, drained, state)
    if refused is None:
        assert message is None
    else:
        assert refused in message
        assert "Nothing was run" in message and "level quick" in message
        assert "drain" in message


def test_many_processes_are_listed_five_and_counted():
    jobs = [dict(JOB, pid=pid) for pid in range(100, 108)]
    message = load_refusal("gpu-07", LOAD, jobs, True)
    assert "8 compute process(es)" in message and "pid 104 " in message and "pid 105 " not in message and "and 3 more" in message


def test_not_drained_says_how_to_drain_and_how_to_vouch_without_slurm():
    message = load_refusal("gpu-07", LOAD, [], None)
    assert "scontrol update NodeName=gpu-07 State=DRAIN" in message and "gpu_validate_drained: true" in message


@pytest.mark.parametrize(
    ("fixture", "drained"),
    [
        ("show_node_idle.txt", False),
        ("show_node_mixed.txt", False),
        ("show_node_mixed_drain_ours.txt", False),  # draining: jobs still run
        ("show_node_multiline_mixed_drain.txt", False),
        ("show_node_idle_drain_others.txt", True),  # drained by anyone: no job can start
        ("show_node_idle_drain_multiline_reason.txt", True),
        ("show_node_down_drain.txt", True),
        ("show_node_down_admin.txt", False),  # DOWN without DRAIN: Slurm puts it back when it answers
    ],
)
def test_slurm_drain(fixture, drained):
    name, is_drained, state = slurm_drain((SLURM / fixture).read_text())
    assert is_drained is drained
    assert name and state


@pytest.mark.parametrize("record", ["", "scontrol: error: Invalid node name specified\n", "NodeName=gpu-07 State=IDLE+DR"])
def test_an_unreadable_slurm_record_is_no_drain(record):
    with pytest.raises(NodeInUseError, match="slurm_node_record is not the node's scontrol show node output"):
        slurm_drain(record)
