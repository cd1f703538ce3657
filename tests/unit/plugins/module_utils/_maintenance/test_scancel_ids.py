"""The job ids the node_maintenance role gives scancel (plugins/module_utils/_maintenance/slurm.py: scancel_ids)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.maintenance import FilterModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance import slurm

# -- scancel_ids: what scancel is given ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "ids"),
    [
        ([], []),
        ([{"id": "1234", "user": "alice", "name": "train"}], ["1234"]),
        ([{"id": "1234_7"}, {"id": "1235+1"}, {"id": 99}], ["1234_7", "1235+1", "99"]),
        ([{"id": "1234"}, {"id": "1234"}, {"id": "7"}], ["1234", "7"]),  # a job listed twice is cancelled once
    ],
)
def test_scancel_ids_accepts_the_forms_squeue_prints(jobs, ids):
    assert slurm.scancel_ids(jobs) == ids


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([{"id": "1234"}, {"id": "--user=alice"}], "jobs[1].id '--user=alice' is not a Slurm job id"),
        ([{"id": "-1"}], "jobs[0].id '-1' is not a Slurm job id"),
        ([{"id": "1234 5678"}], "jobs[0].id '1234 5678' is not a Slurm job id"),
        ([{"id": "1234\n"}], "jobs[0].id '1234\\n' is not a Slurm job id"),
        ([{"id": "1234_[1-3]"}], "jobs[0].id '1234_[1-3]' is not a Slurm job id"),
        ([{"id": "1234.0"}], "jobs[0].id '1234.0' is not a Slurm job id"),
        ([{"id": ""}], "jobs[0].id '' is not a Slurm job id"),
        ([{"id": True}], "jobs[0].id bool is not a Slurm job id"),
        ([{"user": "alice"}], "jobs[0].id NoneType is not a Slurm job id"),
        (["1234"], "jobs[0].id NoneType is not a Slurm job id"),
        ("1234", "jobs must be a list of jobs ({id, user, name} as slurm_node returns them), got str"),
    ],
)
def test_scancel_ids_refuses_anything_else_naming_the_entry(jobs, message):
    with pytest.raises(slurm.SlurmArgumentError) as caught:
        slurm.scancel_ids(jobs)
    assert str(caught.value).startswith(message)
    assert "nothing was cancelled" in str(caught.value) or "must be a list" in str(caught.value)


def test_the_filter_names_itself():
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet\.lifecycle\.slurm_scancel_ids: jobs\[0\]\.id '1; reboot' is not a Slurm job id"):
        FilterModule().filters()["slurm_scancel_ids"]([{"id": "1; reboot"}])
