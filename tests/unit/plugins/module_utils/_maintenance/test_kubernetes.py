"""The Kubernetes backend's decisions (plugins/module_utils/_maintenance/kubernetes.py) over real-shaped API objects.

No API server can run here: the Node and Pod objects in tests/fixtures/maintenance/k8s/ have the shape
`kubectl get node gpu-01 -o json` / `kubectl get pods -A --field-selector spec.nodeName=gpu-01 -o json` print
(what kubernetes.core.k8s_info returns as resources), and the k8s_drain results the texts kubernetes.core 6.2's
k8s_drain writes.
"""

from __future__ import annotations

import copy
import json

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.kubernetes import (
    ANNOTATION,
    KubernetesMaintenanceError,
    cordon_plan,
    drain_blockers,
    drain_outcome,
    parse_selector,
    uncordon_plan,
)

from tests.conftest import OWN

K8S = OWN / "maintenance" / "k8s"
NODE = json.loads((K8S / "node-gpu-01.json").read_text())
PODS = json.loads((K8S / "pods-gpu-01.json").read_text())
RID = "r-0a1b2c3d4e"


def node(unschedulable=None, annotation=None, taints=None, resource_version="48213377"):
    obj = copy.deepcopy(NODE)
    if unschedulable is not None:
        obj["spec"]["unschedulable"] = unschedulable
    if annotation is not None:
        obj["metadata"]["annotations"][ANNOTATION] = annotation
    if taints is not None:
        obj["spec"]["taints"] = taints
    if resource_version is None:
        del obj["metadata"]["resourceVersion"]
    else:
        obj["metadata"]["resourceVersion"] = resource_version
    return obj


CORDON_TAINT = [{"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable", "timeAdded": "2026-12-01T09:58:03Z"}]


# --- cordon -------------------------------------------------------------------------------------


def test_schedulable_node_is_cordoned_after_a_mark_guarded_by_its_resource_version():
    plan = cordon_plan(node(), RID)
    assert plan["action"] == "cordon" and plan["ours"] is True and plan["reason"] is None
    assert plan["annotate"] == {"metadata": {"annotations": {ANNOTATION: RID}, "resourceVersion": "48213377"}}


def test_node_cordoned_by_this_rollout_is_ours_already():
    plan = cordon_plan(node(unschedulable=True, annotation=RID, taints=CORDON_TAINT), RID)
    assert plan == {"node": "gpu-01", "action": "none", "ours": True, "reason": None, "annotate": None}


def test_node_cordoned_by_a_person_is_skipped_with_the_cordon_kept():
    plan = cordon_plan(node(unschedulable=True, taints=CORDON_TAINT), RID)
    assert plan["action"] == "skip" and plan["ours"] is False and plan["annotate"] is None
    assert plan["reason"].startswith("cordoned by others: node gpu-01 is cordoned (spec.unschedulable) without our")
    assert "node.kubernetes.io/unschedulable:NoSchedule" in plan["reason"]
    assert plan["reason"].endswith("their cordon is kept")


def test_node_cordoned_by_another_rollout_is_skipped_naming_it():
    plan = cordon_plan(node(unschedulable=True, annotation="r-ffffffffff"), RID)
    assert plan["action"] == "skip"
    assert f"{ANNOTATION}: r-ffffffffff (another rollout)" in plan["reason"]


def test_schedulable_node_marked_by_another_rollout_is_left_alone():
    # that rollout marks before it cordons: it may be between the two now
    plan = cordon_plan(node(annotation="r-ffffffffff"), RID)
    assert plan["action"] == "skip" and plan["annotate"] is None
    assert "kubectl annotate node gpu-01 gpufleet.io/cordoned-by-" in plan["reason"]


def test_our_mark_on_a_schedulable_node_is_cordoned_again():
    # a run interrupted between the mark and the cordon
    assert cordon_plan(node(annotation=RID), RID)["action"] == "cordon"


def test_unschedulable_false_or_missing_reads_as_schedulable():
    assert cordon_plan(node(unschedulable=False), RID)["action"] == "cordon"
    without_rv = cordon_plan(node(resource_version=None), RID)
    assert without_rv["annotate"] == {"metadata": {"annotations": {ANNOTATION: RID}}}


@pytest.mark.parametrize("bad", ["", "r 1", "r-1\n", "a" * 65, None, 7, "r:1"])
def test_bad_rollout_id_is_refused(bad):
    with pytest.raises(KubernetesMaintenanceError, match="rollout_id"):
        cordon_plan(node(), bad)
    with pytest.raises(KubernetesMaintenanceError, match="rollout_id"):
        uncordon_plan(node(), bad)


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ({"resources": [NODE]}, "no metadata.name"),
        ({"kind": "Pod", "metadata": {"name": "x"}}, "expected a Node"),
        ([NODE], "must be a mapping"),
        ({"kind": "Node", "metadata": {"name": "gpu-01", "annotations": ["x"]}}, "annotations of node gpu-01 must be a mapping"),
    ],
)
def test_what_is_not_a_node_is_refused(obj, match):
    with pytest.raises(KubernetesMaintenanceError, match=match):
        cordon_plan(obj, RID)


# --- uncordon ----------------------------------------------------------------------------------


def test_our_cordon_is_uncordoned_then_unmarked():
    plan = uncordon_plan(node(unschedulable=True, annotation=RID, taints=CORDON_TAINT), RID)
    assert plan["action"] == "uncordon"
    assert plan["unannotate"] == {"metadata": {"annotations": {ANNOTATION: None}}}


def test_our_mark_on_a_node_someone_uncordoned_is_only_removed():
    assert uncordon_plan(node(annotation=RID), RID)["action"] == "unmark"


@pytest.mark.parametrize("annotation", [None, "r-ffffffffff"])
def test_someone_elses_cordon_is_kept(annotation):
    plan = uncordon_plan(node(unschedulable=True, annotation=annotation, taints=CORDON_TAINT), RID)
    assert plan["action"] == "keep" and plan["unannotate"] is None
    assert plan["reason"].startswith("not uncordoned: node gpu-01 is cordoned")


def test_schedulable_node_of_no_one_needs_nothing():
    assert uncordon_plan(node(), RID) == {"node": "gpu-01", "action": "none", "reason": None, "unannotate": None}


# --- drain blockers ----------------------------------------------------------------------------


def test_default_options_sort_the_pods_as_k8s_drain_does():
    sorted_pods = drain_blockers(PODS, "gpu-01")
    # ReplicaSet pod and the finished Job pod are evicted; gpu-02's pod is not counted
    assert sorted_pods["evict"] == ["ml/trainer-7c9d5f6b8-x2kq4", "ml/nccl-check-29381-7w5tq"]
    assert [i["pod"] for i in sorted_pods["ignored"]] == ["gpu-operator/nvidia-device-plugin-daemonset-4kx9z", "kube-system/kube-proxy-gpu-01"]
    blockers = {b["pod"]: b["why"] for b in sorted_pods["blockers"]}
    assert set(blockers) == {"gpu-operator/nvidia-dcgm-exporter-q8m2t", "ml/redis-cache-0", "default/debug-shell"}
    # k8s_drain checks emptyDir before ownership: a DaemonSet pod with one blocks despite ignore_daemonsets
    assert "ignore_daemonsets does not spare it" in blockers["gpu-operator/nvidia-dcgm-exporter-q8m2t"]
    assert "no controller" in blockers["default/debug-shell"]


def test_delete_emptydir_data_evicts_them_and_warns_for_the_daemonset_pod():
    sorted_pods = drain_blockers(PODS, "gpu-01", delete_emptydir_data=True)
    assert "ml/redis-cache-0" in sorted_pods["evict"] and "gpu-operator/nvidia-dcgm-exporter-q8m2t" in sorted_pods["evict"]
    assert [b["pod"] for b in sorted_pods["blockers"]] == ["default/debug-shell"]
    assert any("DaemonSet pod with an emptyDir" in w for w in sorted_pods["warnings"])


def test_without_ignore_daemonsets_a_daemonset_pod_blocks():
    sorted_pods = drain_blockers(PODS, "gpu-01", ignore_daemonsets=False, delete_emptydir_data=True, force=True)
    assert [b["pod"] for b in sorted_pods["blockers"]] == ["gpu-operator/nvidia-device-plugin-daemonset-4kx9z"]
    assert "default/debug-shell" in sorted_pods["evict"]


@pytest.mark.parametrize(
    ("selectors", "selected"),
    [
        (["tier=batch"], {"ml/trainer-7c9d5f6b8-x2kq4", "ml/nccl-check-29381-7w5tq"}),
        (["app==trainer"], {"ml/trainer-7c9d5f6b8-x2kq4"}),
        (["tier!=batch,tier"], {"ml/redis-cache-0", "kube-system/kube-proxy-gpu-01"}),
        (["app in (trainer, redis-cache)"], {"ml/trainer-7c9d5f6b8-x2kq4", "ml/redis-cache-0"}),
        (
            ["tier notin (batch,infra)", "!run"],  # notin matches pods without the label too, as in Kubernetes
            {"kube-system/kube-proxy-gpu-01", "gpu-operator/nvidia-device-plugin-daemonset-4kx9z", "gpu-operator/nvidia-dcgm-exporter-q8m2t"},
        ),
    ],
)
def test_pod_selectors_choose_the_pods_like_a_label_selector(selectors, selected):
    sorted_pods = drain_blockers(PODS, "gpu-01", pod_selectors=selectors, delete_emptydir_data=True)
    seen = set(sorted_pods["evict"]) | {i["pod"] for i in sorted_pods["ignored"]} | {b["pod"] for b in sorted_pods["blockers"]}
    assert seen == selected


@pytest.mark.parametrize("selector", ["", "app=", "=web", "app in trainer", "app in (a", "a b", "app=we b"])
def test_malformed_selector_is_refused(selector):
    if selector == "app=":  # an empty value is a valid equality requirement
        assert parse_selector(selector) == [("app", "=", [""])]
        return
    with pytest.raises(KubernetesMaintenanceError, match="pod selector"):
        parse_selector(selector)


def test_bad_pod_input_is_refused():
    with pytest.raises(KubernetesMaintenanceError, match="list of Pod objects"):
        drain_blockers({"resources": PODS}, "gpu-01")
    with pytest.raises(KubernetesMaintenanceError, match="not one string"):
        drain_blockers(PODS, "gpu-01", pod_selectors="app=web")
    with pytest.raises(KubernetesMaintenanceError, match="expected Pod objects"):
        drain_blockers([NODE], "gpu-01")
    assert drain_blockers(None, "gpu-01") == {"evict": [], "ignored": [], "blockers": [], "warnings": []}


# --- drain outcome ------------------------------------------------------------------------------

PDB_MSG = "Failed to delete pod ml/trainer-7c9d5f6b8-x2kq4 due to: Cannot evict pod as it would violate the pod's disruption budget."


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({"failed": True, "msg": PDB_MSG}, "pdb"),
        ({"failed": False, "msg": PDB_MSG, "failed_when_result": False}, "pdb"),  # after failed_when rewrote failed
        ({"failed": True, "msg": "Failed to delete pod ml/redis-cache-0 due to: 429 Reason: Too Many Requests"}, "pdb"),
        ({"failed": True, "msg": "Failed to delete pod ml/x due to: This pod has more than one PodDisruptionBudget, which the eviction "
                                 "subresource does not support."}, "error"),
        ({"failed": True, "msg": "Pod deletion errors: cannot delete Pods with local storage: ml/redis-cache-0."}, "blocked"),
        ({"failed": True, "msg": "Node gpu-01 not found."}, "error"),
        ({"changed": False, "skipped": True}, "error"),
        ({"changed": True, "result": "node gpu-01 marked unschedulable. 2 Pod(s) deleted from node."}, "drained"),
    ],
)
def test_drain_outcome_reads_the_result_text(result, status):
    assert drain_outcome(result, {"evict": []})["status"] == status


def test_pdb_outcome_names_the_pod():
    outcome = drain_outcome({"failed": True, "msg": PDB_MSG})
    assert outcome["pod"] == "ml/trainer-7c9d5f6b8-x2kq4" and outcome["pods"] == ["ml/trainer-7c9d5f6b8-x2kq4"]
    assert "PodDisruptionBudget" in outcome["message"]


def test_pods_still_there_after_the_wait_are_a_timeout():
    done = {"changed": True, "result": "node gpu-01 already marked unschedulable. 2 Pod(s) deleted from node."}
    left = drain_blockers(PODS[:1], "gpu-01")
    outcome = drain_outcome(done, left)
    assert outcome["status"] == "timeout" and outcome["pods"] == ["ml/trainer-7c9d5f6b8-x2kq4"]
    # the DaemonSet and mirror pods that stay are no timeout
    assert drain_outcome(done, drain_blockers(PODS[1:2] + PODS[3:4], "gpu-01"))["status"] == "drained"


def test_blockers_found_before_the_drain_are_the_outcome():
    before = drain_blockers(PODS, "gpu-01")
    outcome = drain_outcome({"skipped": True}, None, before)  # the role does not run k8s_drain then
    assert outcome["status"] == "blocked"
    assert outcome["pods"] == ["gpu-operator/nvidia-dcgm-exporter-q8m2t", "ml/redis-cache-0", "default/debug-shell"]
    assert outcome["message"].startswith("pods that k8s_drain will not evict: gpu-operator/nvidia-dcgm-exporter-q8m2t - uses an emptyDir")
    assert outcome["jobs"][2] == {"id": "default/debug-shell", "user": "", "name": "pod"}
    # no blockers before: the result decides
    assert drain_outcome({"changed": True, "result": "done"}, {"evict": []}, {"blockers": []})["status"] == "drained"
