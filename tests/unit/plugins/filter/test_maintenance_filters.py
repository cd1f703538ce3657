"""The maintenance filters: names, wiring to _maintenance/kubernetes.py and slurm.py, errors naming the filter."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.maintenance import FilterModule

FILTERS = FilterModule().filters()
NODE = {"kind": "Node", "metadata": {"name": "gpu-01", "resourceVersion": "7"}, "spec": {}}


def test_filters_are_exported():
    assert set(FILTERS) == {"k8s_cordon_plan", "k8s_uncordon_plan", "k8s_drain_blockers", "k8s_drain_outcome", "slurm_reboot_next", "slurm_scancel_ids"}


def test_cordon_then_uncordon_round_trip():
    plan = FILTERS["k8s_cordon_plan"](NODE, "r-1")
    assert plan["action"] == "cordon"
    cordoned = {"kind": "Node", "metadata": {"name": "gpu-01", "annotations": plan["annotate"]["metadata"]["annotations"]},
                "spec": {"unschedulable": True}}
    assert FILTERS["k8s_uncordon_plan"](cordoned, "r-1")["action"] == "uncordon"
    assert FILTERS["k8s_uncordon_plan"](cordoned, "r-2")["action"] == "keep"


@pytest.mark.parametrize(
    ("name", "args", "match"),
    [
        ("k8s_cordon_plan", (NODE, "bad id"), "gpufleet.lifecycle.k8s_cordon_plan: rollout_id"),
        ("k8s_uncordon_plan", ({"kind": "Pod"}, "r-1"), "gpufleet.lifecycle.k8s_uncordon_plan: expected a Node"),
        ("k8s_drain_blockers", ([], "gpu-01", ["a b"]), "gpufleet.lifecycle.k8s_drain_blockers: pod selector"),
        ("k8s_drain_outcome", ("not a result",), "gpufleet.lifecycle.k8s_drain_outcome: the k8s_drain result must be a mapping"),
        ("k8s_cordon_plan", (NODE,), "gpufleet.lifecycle.k8s_cordon_plan: .*rollout_id"),
    ],
)
def test_errors_name_the_filter(name, args, match):
    with pytest.raises(AnsibleFilterError, match=match):
        FILTERS[name](*args)


def test_slurm_reboot_next_is_the_decision_and_names_itself_on_bad_input():
    issued = {"flags": ["DRAIN", "REBOOT_ISSUED"], "state": "DOWN+DRAIN+REBOOT_ISSUED", "hold": "ours", "hold_why": None}
    assert FILTERS["slurm_reboot_next"](False, asked=["slurm"], node=issued, bmc=True, waited=120)["action"] == "node"
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.slurm_reboot_next: asked must list"):
        FILTERS["slurm_reboot_next"](False, asked=["ipmi"])
