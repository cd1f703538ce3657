"""The rollout_record, rollout_records and rollout_lost_states filters: the record of each target, a lost one's included."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.rollout_record import FilterModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import validate_records

FILTERS = FilterModule().filters()
RID = "r-0123456789"
T = 1_764_590_000.0
PLAN = {"canary": ["gpu-01"], "waves": [["gpu-02", "gpu-03"]], "order": ["gpu-01", "gpu-02", "gpu-03"], "domains": {}}
OLD = {"driver": "570.124.06"}
ROLLBACK = {"decided_by": "validate", "reason": "xid: Xid 79", "result": "validated"}


class Undefinedish(dict):
    """A host's variables where one fact's template fails, as Ansible's HostVars may raise."""

    def __getitem__(self, key):
        if key == "__rollout_drain":
            raise RuntimeError("'node_maintenance_drain' is undefined")
        return super().__getitem__(key)


def test_rollout_record_refuses_a_contradiction_with_the_filters_name():
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.rollout_record: node gpu-03: its result is rolled_back"):
        FILTERS["rollout_record"]({"result": "rolled_back", "settled": True}, node="gpu-03", rollout=RID,
                                  section={"id": RID, "status": "done", "result": "rolled_back", "phases": []})


@pytest.mark.parametrize(("args", "words"), [
    ({"node": None, "rollout": RID}, "node must be the inventory host name"),
    ({"node": "gpu-01", "rollout": ""}, "rollout must be the rollout's id (node gpu-01)"),
])
def test_rollout_record_needs_the_node_and_the_rollout(args, words):
    with pytest.raises(AnsibleFilterError, match=words.replace("(", r"\(").replace(")", r"\)")):
        FILTERS["rollout_record"]({"result": "not_started"}, **args)


def test_rollout_records_keeps_each_record_and_builds_a_lost_targets_from_its_facts():
    recorded = {"node": "gpu-01", "rollout_id": RID, "result": "upgraded", "wave": 0}
    hostvars = {
        "gpu-01": {"rollout_record": recorded},
        # Rolled back, then lost (its record never built): its rollback and last phase record from the role's facts.
        "gpu-02": Undefinedish({
            "rollout_result": "rolled_back", "__rollout_settled": False, "__rollout_before": OLD, "__rollout_rollback": ROLLBACK,
            "__rollout_drain": None, "__rollout_skip_reason": "", "__rollout_slurm_name": "n02",
            "__rollout_phase_result": {"changed": True, "rollout": {"id": RID, "status": "done", "result": "rolled_back", "wave": 1,
                                                                    "phases": [{"name": "rollback", "start": T, "end": T + 1, "status": "ok"}]}},
        }),
        # Lost before its first phase of this run: the preflight read is its last section.
        "gpu-03": {"rollout_result": "not_started", "__rollout_skip_reason": "", "__rollout_slurm_name": "n03",
                   "__rollout_phase_result": {"skipped": True}, "__rollout_read": {"rollout": {"id": RID, "status": "running", "phases": []}}},
    }
    slurm = {"unavailable": [{"node": "n03", "state": "IDLE+DRAIN", "reason": "gpufleet: r-0123456789 admitted", "ours": True}]}
    records = FILTERS["rollout_records"](["gpu-01", "gpu-02", "gpu-03"], hostvars, rollout=RID, plan=PLAN, slurm=slurm)
    assert records[0] == recorded
    assert (records[1]["rollback"], records[1]["wave"], records[1]["before"]) == (ROLLBACK, 1, OLD)
    assert records[1]["skip_reason"] == "lost from the run (unreachable); in service in Slurm"
    assert records[2]["wave"] == 1 and records[2]["skip_reason"].startswith("lost from the run (unreachable); Slurm shows it IDLE+DRAIN, drained by")
    validate_records(records[1:], RID)
    assert FILTERS["rollout_lost_states"](["gpu-02", "gpu-03"], hostvars, slurm) == {"gpu-03": slurm["unavailable"][0]}
    # Slurm not read (another backend, or its read failed): nothing more than lost.
    unread = FILTERS["rollout_records"](["gpu-03"], hostvars, rollout=RID, plan=PLAN, slurm={"skipped": True})
    assert unread[0]["skip_reason"] == "lost from the run (unreachable)"


@pytest.mark.parametrize(("name", "args", "words"), [
    ("rollout_records", ("gpu-01", {}), "must be a list of inventory host names"),
    ("rollout_records", (["gpu-01"], None), "hostvars is required"),
    ("rollout_records", (["gpu-09"], {"gpu-01": {}}), "host gpu-09 is not in hostvars"),
    ("rollout_lost_states", ("gpu-01",), "must be a list of inventory host names"),
])
def test_bad_input_is_refused_naming_the_filter(name, args, words):
    with pytest.raises(AnsibleFilterError, match=f"gpufleet.lifecycle.{name}: .*{words}"):
        FILTERS[name](*args, rollout=RID) if name == "rollout_records" else FILTERS[name](*args)
