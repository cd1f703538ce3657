# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Multi-node NVLink (GB200 / GB300 NVL72) facts of one node, from what the parsers read (private, pure).

* nvlink_domain(gpus): the NVLink domain all GPUs of a tray agree on (their Fabric ClusterUUID and
  CliqueId) and every fabric that is not Completed / Success / Healthy.
* imex_matches_driver(imex, driver): IMEX refuses to start unless its version is the driver's.
* imex_facts(...): the IMEX facts of a node from its reads.
* imex_ctl_nodes_args(version), imex_ctl_lacks_json(out, err): how to ask nvidia-imex-ctl for the domain (JSON where it can).
"""

from __future__ import annotations

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
FABRIC_GOOD = {"state": "Completed", "status": "Success"}
# Health summary: "Healthy"; None where the GPU prints N/A (H100 and older report no summary).
HEALTH_GOOD = ("Healthy", None)
# nvidia-imex-ctl -N -j (JSON) from this branch on: NVIDIA's ai-cloud-validation reads it from 580.95.05; the usage of
# 570.148.08 lists no -j (../shared/fixtures/real/gb200/imex). An older IMEX gets -N (text, same parser result).
IMEX_CTL_JSON_BRANCH = 580


def _gpu_name(gpu):
    return f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id') or gpu.get('uuid') or 'no bus id'})"


def fabric_problems(gpu):
    """Why one GPU's fabric is not ready, as sentences; [] when it is (or the GPU has no Fabric block)."""
    fabric = gpu.get("fabric")
    if not fabric:
        return []
    problems = []
    for key, good in FABRIC_GOOD.items():
        if fabric.get(key) != good:
            problems.append(f"{_gpu_name(gpu)}: fabric {key} is {fabric.get(key)!r}, not {good!r}")
    if fabric.get("health") not in HEALTH_GOOD:
        problems.append(f"{_gpu_name(gpu)}: fabric health is {fabric.get('health')!r}, not 'Healthy'")
    return problems


def nvlink_domain(gpus):
    """``{"cluster_uuid", "clique_id", "multi_node", "fabric_ok", "problems"}`` of a node's GPUs.

    ``cluster_uuid``: the ClusterUUID every GPU with a Fabric block reports (it names the NVLink
    domain); None when they disagree (a contradiction: listed in ``problems``) or none reports one.
    ``multi_node``: True for a non-zero UUID, False for the all-zero one (HGX, PCIe, or a tray whose
    fabric failed to join: then ``problems`` says why), None when no GPU has a Fabric block.
    ``fabric_ok``: every fabric Completed / Success / Healthy (None without any fabric).
    """
    with_fabric = [gpu for gpu in gpus or [] if gpu.get("fabric")]
    result = {"cluster_uuid": None, "clique_id": None, "multi_node": None, "fabric_ok": None, "problems": []}
    if not with_fabric:
        return result
    problems = [problem for gpu in with_fabric for problem in fabric_problems(gpu)]
    uuids = {gpu["fabric"].get("cluster_uuid") for gpu in with_fabric}
    cliques = {gpu["fabric"].get("clique_id") for gpu in with_fabric}
    if len(uuids) > 1:
        listed = ", ".join(f"{_gpu_name(gpu)} {gpu['fabric'].get('cluster_uuid')}" for gpu in with_fabric)
        problems.append(f"the GPUs of this node report different ClusterUUIDs (NVLink domains): {listed}")
    elif uuids != {None}:
        result["cluster_uuid"] = next(iter(uuids))
        result["multi_node"] = result["cluster_uuid"] != ZERO_UUID
    if len(cliques) > 1:
        listed = ", ".join(f"{_gpu_name(gpu)} {gpu['fabric'].get('clique_id')}" for gpu in with_fabric)
        problems.append(f"the GPUs of this node report different CliqueIds: {listed}")
    else:
        result["clique_id"] = next(iter(cliques))
    result["fabric_ok"] = not problems
    result["problems"] = problems
    return result


def imex_matches_driver(imex_version, driver_version):
    """True when IMEX ``imex_version`` is the driver's; None when either is unknown.

    ``nvidia-imex --version`` prints the whole version (570.148.08); ``nvidia-imex-ctl -N`` may print
    only its first two parts (570.172 of 570.172.08): that prefix, followed by the patch, matches.
    """
    if not imex_version or not driver_version:
        return None
    return driver_version == imex_version or driver_version.startswith(imex_version + ".")


def imex_ctl_nodes_args(imex_version):
    """The arguments of ``nvidia-imex-ctl`` that print the domain: ``-N -j`` from R580, ``-N`` before or when unknown."""
    major = (imex_version or "").split(".", 1)[0]
    return ["-N", "-j"] if major.isdigit() and int(major) >= IMEX_CTL_JSON_BRANCH else ["-N"]


def imex_ctl_lacks_json(out, err):
    """True when nvidia-imex-ctl refused ``-j`` with its usage text (an IMEX without JSON output): ask again with ``-N``."""
    return "Usage: nvidia-imex-ctl" in f"{out or ''}\n{err or ''}"


def imex_facts(version, service_state, nodes_config, domain, driver_version, domain_error=None):
    """The IMEX facts of a node: ``{"installed", "version", "matches_driver", "service_state", "running",
    "nodes_config", "domain", "domain_error", "problems"}``.

    ``version``: ``nvidia-imex --version`` (None: not installed); ``domain``: parse_ctl_nodes' result or
    None; ``domain_error``: why ``nvidia-imex-ctl -N`` gave none (daemon down). A node without IMEX
    (HGX, PCIe) gets ``installed`` False and no problem.
    """
    facts = {
        "installed": version is not None,
        "version": version,
        "matches_driver": None,
        "service_state": service_state,
        "running": None if service_state is None else service_state == "active",
        "nodes_config": nodes_config,
        "domain": None,
        "domain_error": None,
        "problems": [],
    }
    if version is None:
        return facts
    problems = []
    matches = imex_matches_driver(version, driver_version)
    if matches is False:
        problems.append(
            f"nvidia-imex {version} is not the loaded driver's version {driver_version}: IMEX refuses to start; install nvidia-imex={driver_version}"
        )
    if service_state is not None and service_state != "active":
        problems.append(f"the nvidia-imex service is {service_state!r}, not 'active'")
    if nodes_config is None:
        problems.append("no /etc/nvidia-imex/nodes_config.cfg: IMEX does not know the trays of its NVLink domain")
    if domain is not None:
        if not domain["domain_up"]:
            problems.append(f"the IMEX domain state is {domain['domain_state']!r}, not 'UP'")
        if domain["version_mismatch"]:
            problems.append("nvidia-imex-ctl -N shows a version mismatch (!V!) between trays: communication disabled")
        if domain["node_map_mismatch"]:
            problems.append("nvidia-imex-ctl -N shows a node map mismatch (!M!): nodes_config.cfg differs between trays")
        down = [f"#{node['id']} {node['address']} {node['state']}" for node in domain["nodes"] if node["state"] != "READY"]
        if down:
            problems.append(f"IMEX nodes not READY: {', '.join(down)}")
        if nodes_config is not None and sorted(node["address"] for node in domain["nodes"]) != sorted(nodes_config):
            problems.append("the IMEX daemon's node list differs from /etc/nvidia-imex/nodes_config.cfg: restart IMEX after changing the file")
    elif domain_error:
        problems.append(f"nvidia-imex-ctl -N gave no domain state: {domain_error}")
    facts.update(matches_driver=matches, domain=domain, domain_error=domain_error, problems=problems)
    return facts
