# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Kubernetes backend's decisions for the node_maintenance role (private: may change without notice).

Pure functions over the Kubernetes API's own JSON (a ``Node`` and ``Pod`` objects as ``kubernetes.core.k8s_info``
returns them, and a registered ``kubernetes.core.k8s_drain`` result): whether a node may be cordoned and whether
the cordon is ours, what to uncordon, which pods block a drain, and whether a failed drain was a
PodDisruptionBudget refusal (HTTP 429) worth trying again. Nothing here talks to an API server; the role's
tasks do, with kubernetes.core.

Ownership: the rollout that cordons a node annotates it ``gpufleet.io/cordoned-by: <rollout id>`` first (a merge
patch carrying the node's ``resourceVersion``, so that the API server refuses it with 409 Conflict when the node
changed since it was read), then cordons it; it uncordons only a node carrying its own annotation, then removes
the annotation. A node cordoned without our annotation is someone else's: it is skipped and left cordoned.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import ids as _ids

ANNOTATION = "gpufleet.io/cordoned-by"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
ROLLOUT_ID = _ids.ROLLOUT_ID  # one rule for every module that takes a rollout id
# What k8s_drain (kubernetes.core 6.x) writes in its failure when an eviction is refused: the API server's message
# for a PodDisruptionBudget that allows no disruption now (HTTP 429 Too Many Requests).
_EVICT_FAILED = re.compile(r"Failed to delete pod (?P<namespace>[^/\s]+)/(?P<name>\S+) due to: (?P<why>.*)", re.DOTALL)
_PDB_WORDS = ("disruption budget", "Too Many Requests", "TooManyRequests", "429")
# One requirement of a label selector (the equality- and set-based forms kubectl accepts).
_LABEL_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]{0,252}/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_REQ_EQUAL = re.compile(rf"\s*(?P<key>{_LABEL_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_LABEL_VALUE})\s*")
_REQ_SET = re.compile(rf"\s*(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)\s*")
_REQ_EXISTS = re.compile(rf"\s*(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})\s*")


class KubernetesMaintenanceError(GpufleetError):
    """Input the decisions cannot judge (not a Node, a bad rollout id, a malformed selector)."""


# --- reading the API's objects ----------------------------------------------------------------------


def _mapping(value, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubernetesMaintenanceError(f"{what} must be a mapping, got {type(value).__name__}")
    return value


def _check_rollout_id(rollout_id):
    problem = _ids.rollout_id_problem(rollout_id)
    if problem:
        raise KubernetesMaintenanceError(problem)


def read_node(node):
    """``{name, unschedulable, annotation, resource_version, taints}`` of a Node object (k8s_info's ``resources[0]``)."""
    node = _mapping(node, "the node")
    kind = node.get("kind")
    if kind not in (None, "Node"):
        raise KubernetesMaintenanceError(f"expected a Node object, got kind {kind!r}")
    meta = _mapping(node.get("metadata"), "metadata of the node")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise KubernetesMaintenanceError("the Node object has no metadata.name: pass k8s_info's resources[0], not the whole result")
    spec = _mapping(node.get("spec"), f"spec of node {name}")
    annotations = _mapping(meta.get("annotations"), f"metadata.annotations of node {name}")
    taints = []
    for raw_taint in spec.get("taints") or []:
        taint = _mapping(raw_taint, f"a taint of node {name}")
        value = f"={taint['value']}" if taint.get("value") else ""
        taints.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return {
        "name": name,
        "unschedulable": spec.get("unschedulable") is True,
        "annotation": annotations.get(ANNOTATION),
        "resource_version": meta.get("resourceVersion"),
        "taints": taints,
    }


def _their_cordon(view):
    taints = f"; taints {', '.join(view['taints'])}" if view["taints"] else ""
    return f"node {view['name']} is cordoned (spec.unschedulable) {_whose(view)}{taints}"


def _whose(view):
    if view["annotation"] is None:
        return f"without our {ANNOTATION} annotation: by a person or another tool"
    return f"with {ANNOTATION}: {view['annotation']} (another rollout)"


# --- cordon, uncordon -----------------------------------------------------------------------------


def cordon_plan(node, rollout_id):
    """Whether to cordon: ``{"node", "action": "cordon" | "none" | "skip", "ours", "reason", "annotate"}``.

    ``annotate`` is the merge patch that marks the node ours before the cordon (with the node's
    resourceVersion as a precondition), or None. ``none``: already cordoned by this rollout (a resumed run).
    ``skip``: someone else holds the node; ``reason`` says who and that their cordon is kept.
    """
    _check_rollout_id(rollout_id)
    view = read_node(node)
    name, mark = view["name"], view["annotation"]
    if view["unschedulable"]:
        if mark == rollout_id:
            return {"node": name, "action": "none", "ours": True, "reason": None, "annotate": None}
        return {
            "node": name, "action": "skip", "ours": False, "annotate": None,
            "reason": f"cordoned by others: {_their_cordon(view)}; their cordon is kept",
        }
    if mark is not None and mark != rollout_id:
        # Schedulable but marked by another rollout: it annotates before it cordons, so it may be cordoning it right now.
        return {
            "node": name, "action": "skip", "ours": False, "annotate": None,
            "reason": (
                f"marked by another rollout: node {name} carries {ANNOTATION}: {mark}, which annotates a node right before cordoning it; "
                f"left alone. If that rollout is over, remove the mark (kubectl annotate node {name} {ANNOTATION}-)"
            ),
        }
    patch = {"metadata": {"annotations": {ANNOTATION: rollout_id}}}
    if view["resource_version"]:
        patch["metadata"]["resourceVersion"] = view["resource_version"]
    return {"node": name, "action": "cordon", "ours": True, "reason": None, "annotate": patch}


def uncordon_plan(node, rollout_id):
    """What to give back: ``{"node", "action": "uncordon" | "unmark" | "none" | "keep", "reason", "unannotate"}``.

    ``uncordon``: ours (our annotation, cordoned) - uncordon, then remove the annotation (``unannotate``).
    ``unmark``: our annotation on a node someone already uncordoned - remove the annotation only.
    ``keep``: cordoned by someone else - left cordoned, ``reason`` says whose. ``none``: nothing of ours.
    """
    _check_rollout_id(rollout_id)
    view = read_node(node)
    name, mark = view["name"], view["annotation"]
    unannotate = {"metadata": {"annotations": {ANNOTATION: None}}}
    if mark == rollout_id:
        action = "uncordon" if view["unschedulable"] else "unmark"
        return {"node": name, "action": action, "reason": None, "unannotate": unannotate}
    if view["unschedulable"]:
        return {
            "node": name, "action": "keep", "unannotate": None,
            "reason": f"not uncordoned: {_their_cordon(view)}; it stays cordoned",
        }
    return {"node": name, "action": "none", "reason": None, "unannotate": None}


# --- pods that block a drain ------------------------------------------------------------------------


def parse_selector(selector):
    """The requirements of one label selector string (``app=web,tier!=infra``): ``[(key, op, values)]``."""
    if not isinstance(selector, str) or not selector.strip():
        raise KubernetesMaintenanceError(f"pod selector {selector!r} must be a non-empty label selector string such as 'app=web'")
    requirements = []
    for part in _split_requirements(selector):
        for pattern in (_REQ_SET, _REQ_EQUAL, _REQ_EXISTS):
            match = pattern.fullmatch(part)
            if match:
                break
        else:
            raise KubernetesMaintenanceError(
                f"pod selector {selector!r}: {part.strip()!r} is no label requirement (key=value, key!=value, key, !key, key in (a,b), key notin (a,b))"
            )
        groups = match.groupdict()
        if "values" in groups:
            values = [v.strip() for v in groups["values"].split(",") if v.strip()]
            requirements.append((groups["key"], groups["op"], values))
        elif "op" in groups:
            requirements.append((groups["key"], "=" if groups["op"] == "==" else groups["op"], [groups["value"]]))
        else:
            requirements.append((groups["key"], "!exists" if groups["neg"] else "exists", []))
    return requirements


def _split_requirements(selector):
    """Split at the commas outside parentheses (``a in (x,y),b`` is two requirements); linear."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(selector):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(selector[start:index])
            start = index + 1
    parts.append(selector[start:])
    if depth != 0:
        raise KubernetesMaintenanceError(f"pod selector {selector!r} has unbalanced parentheses")
    return parts


def _matches(labels, requirements):
    for key, op, values in requirements:
        present = key in labels
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
        if op in ("=", "in") and (not present or labels[key] not in values):
            return False
        if op in ("!=", "notin") and present and labels[key] in values:
            return False
    return True


def drain_blockers(pods, node_name, pod_selectors=None, ignore_daemonsets=True, delete_emptydir_data=False, force=False):
    """What ``k8s_drain state=drain`` will do with the node's pods, before it does it.

    ``pods``: Pod objects (k8s_info's ``resources``); pods of other nodes are not counted. Mirrors
    k8s_drain's own rules (kubernetes.core 6.x ``filter_pods``), in its order: a mirror (static) pod is
    left alone; a finished pod is evicted; a pod with an ``emptyDir`` volume blocks unless
    ``delete_emptydir_data`` (k8s_drain checks this before ownership, so it blocks even a DaemonSet
    pod, and with ``delete_emptydir_data`` evicts it); a pod without an owner blocks unless ``force``;
    a DaemonSet pod is left alone with ``ignore_daemonsets``, else blocks; any other owned pod is evicted.
    Returns ``{"evict": ["ns/name"], "ignored": [{"pod", "why"}], "blockers": [{"pod", "why"}], "warnings": [...]}``.
    """
    if not isinstance(node_name, str) or not node_name:
        raise KubernetesMaintenanceError("node_name must be the Node's name")
    if pods is None:
        pods = []
    if not isinstance(pods, list):
        raise KubernetesMaintenanceError(f"pods must be a list of Pod objects (k8s_info's resources), got {type(pods).__name__}")
    selectors = pod_selectors or []
    if isinstance(selectors, str):
        raise KubernetesMaintenanceError("pod_selectors must be a list of selector strings, not one string")
    requirements = [req for selector in selectors for req in parse_selector(selector)]
    result = {"evict": [], "ignored": [], "blockers": [], "warnings": []}
    for raw_pod in pods:
        pod = _mapping(raw_pod, "a pod")
        if pod.get("kind") not in (None, "Pod"):
            raise KubernetesMaintenanceError(f"expected Pod objects, got kind {pod.get('kind')!r}")
        meta = _mapping(pod.get("metadata"), "metadata of a pod")
        spec = _mapping(pod.get("spec"), "spec of a pod")
        status = _mapping(pod.get("status"), "status of a pod")
        if spec.get("nodeName") != node_name:
            continue
        if requirements and not _matches(_mapping(meta.get("labels"), "labels of a pod"), requirements):
            continue
        ref = f"{meta.get('namespace', 'default')}/{meta.get('name')}"
        owners = [o.get("kind") for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
        if MIRROR_ANNOTATION in _mapping(meta.get("annotations"), "annotations of a pod"):
            result["ignored"].append({"pod": ref, "why": "mirror (static) pod: the kubelet runs it, the API cannot evict it"})
            continue
        if status.get("phase") in ("Succeeded", "Failed"):
            result["evict"].append(ref)
            continue
        if any(isinstance(v, dict) and "emptyDir" in v for v in spec.get("volumes") or []):
            if not delete_emptydir_data:
                why = "uses an emptyDir volume (its data is lost on eviction): set delete_emptydir_data to evict it"
                if "DaemonSet" in owners:
                    why += " (k8s_drain checks emptyDir before DaemonSet ownership, so ignore_daemonsets does not spare it)"
                result["blockers"].append({"pod": ref, "why": why})
                continue
            if "DaemonSet" in owners:
                result["warnings"].append(f"{ref}: a DaemonSet pod with an emptyDir volume is evicted by k8s_drain (delete_emptydir_data)")
            result["evict"].append(ref)
            continue
        if not owners:
            if force:
                result["evict"].append(ref)
                result["warnings"].append(f"{ref}: a pod without a controller is deleted for good (force)")
            else:
                result["blockers"].append({"pod": ref, "why": "no controller owns it (a bare pod would be lost, not rescheduled)"})
            continue
        if "DaemonSet" in owners:
            if ignore_daemonsets:
                result["ignored"].append({"pod": ref, "why": "DaemonSet pod (ignore_daemonsets)"})
            else:
                result["blockers"].append({"pod": ref, "why": "DaemonSet pod: set ignore_daemonsets to leave it"})
            continue
        result["evict"].append(ref)
    return result


# --- what a drain did -----------------------------------------------------------------------------


def drain_outcome(result, after=None, before=None):
    """Judge a registered ``k8s_drain state=drain`` result: ``{"status", "message", "pod", "pods", "jobs"}``.

    ``before`` is ``drain_blockers`` of the node's pods read before the drain: with blockers, the role does
    not run k8s_drain at all (``blocked``, naming them). ``after`` is ``drain_blockers`` of the pods read
    again after the drain: pods it should have evicted that are still there mean its wait ended first
    (k8s_drain only warns then, and ansible-core 2.19 no longer hands module warnings to a registered
    result as text). ``status``: ``drained``; ``pdb`` (an eviction refused by a PodDisruptionBudget, HTTP
    429: try again later); ``timeout`` (pods still running after the wait); ``blocked`` (pods k8s_drain
    refuses to delete); ``error`` (anything else). Judged from the result's text, so it reads the same
    after ``failed_when`` rewrote ``failed``. ``jobs`` lists the pods that held the node the way the
    Slurm backend lists jobs (``{"id": "namespace/name", "user": "", "name": "pod"}``).
    """
    blockers = list(_mapping(before, "the pods before the drain").get("blockers") or [])
    if blockers:
        listed = "; ".join(f"{b['pod']} - {b['why']}" for b in blockers)
        return _outcome("blocked", f"pods that k8s_drain will not evict: {listed}", [b["pod"] for b in blockers])
    result = _mapping(result, "the k8s_drain result")
    msg = result.get("msg") if isinstance(result.get("msg"), str) else ""
    evict = _EVICT_FAILED.search(msg)
    if evict and any(word in evict.group("why") for word in _PDB_WORDS):
        pod = f"{evict.group('namespace')}/{evict.group('name')}"
        why = evict.group("why").strip()
        return _outcome("pdb", f"eviction of {pod} refused by its PodDisruptionBudget: {why}", [pod], pod=pod)
    if msg.startswith("Pod deletion errors:"):
        return _outcome("blocked", msg, [])
    if result.get("skipped"):
        return _outcome("error", "the drain did not run (skipped)", [])
    if result.get("failed") or result.get("unreachable") or "result" not in result:
        return _outcome("error", msg or "k8s_drain returned no result", [])
    left = list(_mapping(after, "the pods after the drain").get("evict") or [])
    if left:
        return _outcome("timeout", f"pods still on the node after the drain's wait: {', '.join(left)}", left)
    return _outcome("drained", str(result.get("result")), [])


def _outcome(status, message, pods, pod=None):
    return {"status": status, "message": message, "pod": pod, "pods": pods, "jobs": [{"id": ref, "user": "", "name": "pod"} for ref in pods]}
