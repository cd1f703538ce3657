# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The audit's view of multi-node NVLink domains (GB200 / GB300 NVL72): trays grouped by ClusterUUID (private, pure).

A domain is one unit: its trays must run one driver and one IMEX version (IMEX refuses to talk across versions:
``!V!``), every fabric must be Completed / Success / Healthy and the IMEX domain UP. The inventory's
``nvlink_domain`` variable, where set, must name the same groups as the ClusterUUIDs the GPUs report.
"""

from __future__ import annotations

from collections.abc import Mapping

ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _section(facts, name):
    value = facts.get(name) if isinstance(facts, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _problems(section):
    """A fact section's ``problems`` sentences (gpu_facts gives a list of strings; anything else reads as none)."""
    problems = section.get("problems")
    return [str(problem) for problem in problems] if isinstance(problems, list) else []


def _spread(values):
    """``{value: [node, ...]}`` sorted, for the nodes whose value is known."""
    spread = {}
    for node, value in values:
        if value is not None:
            spread.setdefault(value, []).append(node)
    return {value: sorted(nodes) for value, nodes in sorted(spread.items())}


def _listed(spread):
    return "; ".join(f"{value} on {', '.join(nodes)}" for value, nodes in spread.items())


def nvlink_domains(records):
    """``{"domains": [...], "problems": [...]}`` of the audit records (``[{"name", "facts", "nvlink_domain"?}]``).

    Each domain: ``{"cluster_uuid", "inventory_domain", "nodes", "drivers", "imex_versions", "imex_domain_states",
    "problems"}`` (``drivers`` / ``imex_versions`` / ``imex_domain_states``: value -> nodes). ``problems`` (of each
    domain, and all of them with the nodes outside any domain at the top) are sentences naming the nodes. Nodes
    without multi-node NVLink (HGX, PCIe) are in no domain and have no problem here unless the inventory puts them in
    one. Records with an ``error`` are skipped (the report lists them as errors).
    """
    groups = {}
    top = []
    inventory = {}
    for record in sorted(records or [], key=lambda r: str(r.get("name"))):
        if not isinstance(record, Mapping) or record.get("error"):
            continue
        name = str(record.get("name"))
        facts = record.get("facts") or {}
        link = _section(facts, "nvlink")
        wanted = record.get("nvlink_domain")
        uuid = link.get("cluster_uuid")
        if link.get("multi_node"):
            groups.setdefault(uuid, []).append((name, facts))
            if wanted is not None:
                inventory.setdefault(str(wanted), set()).add(uuid)
        else:
            # A tray that failed to join (zero UUID, Insufficient Resources) or whose GPUs disagree: its own problems.
            top.extend(f"{name}: {problem}" for problem in _problems(link))
            # The variable names a rollout unit on HGX too: only a tray (IMEX installed) must also be in an NVLink domain.
            if wanted is not None and _section(facts, "imex").get("installed"):
                top.append(
                    f"{name}: the inventory puts it in NVLink domain {wanted!r} but its GPUs report no multi-node NVLink domain "
                    f"(ClusterUUID {uuid or 'unknown'}): check the tray's fabric (nvidia-smi -q, Fabric)"
                )
    domains = []
    for uuid, members in sorted(groups.items()):
        names = [name for name, _facts in members]
        label = f"NVLink domain {uuid} ({', '.join(names)})"
        problems = [f"{name}: {problem}" for name, facts in members for problem in _problems(_section(facts, "nvlink"))]
        drivers = _spread((name, _section(facts, "driver").get("version")) for name, facts in members)
        imex = [(name, _section(facts, "imex")) for name, facts in members]
        imex_versions = _spread((name, section.get("version")) for name, section in imex)
        states = _spread((name, _section(section, "domain").get("domain_state") if section.get("installed") else None) for name, section in imex)
        if len(drivers) > 1:
            problems.append(f"{label} runs different drivers: {_listed(drivers)}; a domain changes as one unit")
        if len(imex_versions) > 1:
            problems.append(f"{label} runs different IMEX versions: {_listed(imex_versions)}; IMEX disables communication across versions")
        not_up = {state: nodes for state, nodes in states.items() if state != "UP"}
        if not_up:
            problems.append(f"{label}: the IMEX domain is not UP: {_listed(not_up)} (nvidia-imex-ctl -N)")
        for name, section in imex:
            if not section.get("installed"):
                problems.append(f"{name}: no nvidia-imex on a tray of {label}: install nvidia-imex at the driver's version")
            problems.extend(f"{name}: {problem}" for problem in _problems(section))
        wanted_names = _spread((str(r.get("name")), r.get("nvlink_domain")) for r in records if isinstance(r, Mapping) and str(r.get("name")) in names)
        if len(wanted_names) > 1:
            problems.append(f"{label}: the inventory variable nvlink_domain splits it: {_listed(wanted_names)}")
        domains.append(
            {
                "cluster_uuid": uuid,
                "inventory_domain": next(iter(wanted_names)) if len(wanted_names) == 1 else None,
                "nodes": names,
                "drivers": drivers,
                "imex_versions": imex_versions,
                "imex_domain_states": states,
                "problems": problems,
            }
        )
    for wanted, uuids in sorted(inventory.items()):
        if len(uuids) > 1:
            top.append(f"the inventory's NVLink domain {wanted!r} holds trays of {len(uuids)} ClusterUUIDs ({', '.join(sorted(map(str, uuids)))}): "
                       "correct nvlink_domain in the inventory, or the cabling")
    return {"domains": domains, "problems": top + [problem for domain in domains for problem in domain["problems"]]}
