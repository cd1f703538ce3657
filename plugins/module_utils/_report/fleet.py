# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet audit report: build it from per-node records, render it as JSON, Markdown and HTML (private)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import INBAND_GPU_FIRMWARE, drift_summary, node_drift, sku_mixed_versions
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.nvlink_domains import nvlink_domains
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import _Checker, named_entries

REPORT_VERSION = 1

# What the report reads of each GPU and NIC in a node's gpu_facts (node_drift, sku_mixed_versions, _hardware). The rest
# of an H100 node's facts (ECC counters, remapped rows, clock event reasons, temperatures: 25 KB of its 27) is not
# read: report_facts leaves it out, so that the records the fleet_report task carries are a tenth of the facts.
REPORT_GPU_KEYS = ("index", "name", *(fact for _key, _component, fact, _what in INBAND_GPU_FIRMWARE))
REPORT_NIC_KEYS = ("pci", "type", "psid", "part_number", "fw_current", "query_failed", "status")


def report_facts(facts):
    """``facts`` (a node's ansible_facts.gpufleet, any mapping) as a new dict, with each GPU and NIC cut to what the
    report reads of it and the Xid section without its dmesg lines; every other fact is kept as it is. The report
    built from the result equals the one built from ``facts`` (test_gpu_facts.py, over every real capture)."""
    if not isinstance(facts, Mapping):
        return facts
    cut = dict(facts)
    if isinstance(facts.get("xid"), Mapping):  # the critical Xids are read, not each dmesg line of them
        cut["xid"] = {key: value for key, value in facts["xid"].items() if key != "events"}
    for section, keys in (("gpus", REPORT_GPU_KEYS), ("nics", REPORT_NIC_KEYS)):
        items = facts.get(section)
        if isinstance(items, list):
            cut[section] = [{key: item[key] for key in keys if key in item} if isinstance(item, Mapping) else item for item in items]
    return cut


TEXT, FLAG, COUNT = "a string", "true or false", "a whole number"
_IS = {TEXT: lambda v: isinstance(v, str), FLAG: lambda v: isinstance(v, bool), COUNT: lambda v: isinstance(v, int) and not isinstance(v, bool)}
# The facts the report reads, and what each must be (null is always allowed: not read). Any other fact is not read.
FACT_FIELDS = {"kernel": TEXT, "nvidia_smi": TEXT, "nvidia_smi_message": TEXT, "gpu_count": COUNT, "pci_gpu_count": COUNT}
FACT_SECTIONS = {
    "driver": {"version": TEXT, "flavor": TEXT, "installed": FLAG, "loaded": FLAG},
    "fabricmanager": {"version": TEXT, "installed": FLAG, "running": FLAG},
    "nvswitch": {"present": FLAG, "count": COUNT},
    "nvlink": {"cluster_uuid": TEXT, "clique_id": COUNT, "multi_node": FLAG, "fabric_ok": FLAG},
    "imex": {"installed": FLAG, "version": TEXT, "matches_driver": FLAG, "service_state": TEXT},
    "cdmm": {"mode": TEXT, "enabled": FLAG},
}
FACT_LISTS = {
    "gpus": {"index": COUNT, "name": TEXT, **{fact: TEXT for _key, _component, fact, _what in INBAND_GPU_FIRMWARE}},
    "nics": {"pci": TEXT, "type": TEXT, "psid": TEXT, "part_number": TEXT, "fw_current": TEXT, "status": TEXT, "query_failed": FLAG},
}


BMC_FIX = "pass the node's entry of bmc_inventory's inventories as registered (docs/audit.md)"


class _Record(_Checker):
    """rollout_records' checker for ``nodes[index]``, with the lists and typed fields of gpu_facts."""

    def __init__(self, node, index):
        super().__init__(node, index, "nodes", "pass each node's gpu_facts as registered (the gpufleet.lifecycle.audit_records filter; docs/audit.md)")

    def mappings(self, value, field):
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(field, f"must be a list, not {type(value).__name__}")
        for index, item in enumerate(value):
            if not isinstance(item, Mapping):
                self.fail(f"{field}[{index}]", f"must be a mapping, not {type(item).__name__}")
        return value

    def fields(self, value, kinds, field, **fix):
        for key, kind in kinds.items():
            if value.get(key) is not None and not _IS[kind](value[key]):
                self.fail(f"{field}{key}", f"must be {kind} or null, not {type(value[key]).__name__}", **fix)


def validate_records(records):
    """RecordError naming the entry, the node and the field of the first record whose facts or BMC inventory the report
    cannot read (a string where gpu_facts gives a mapping, a number where it gives a version), or of a node given twice."""
    for record, check in named_entries(records, _Record, "name and facts"):
        check.fields(record, {"sku": TEXT, "error": TEXT, "nvlink_domain": TEXT}, "")
        bmc = check.mapping(record.get("bmc"), "bmc")
        if bmc.get("entries") is not None and not isinstance(bmc["entries"], list):
            check.fail("bmc.entries", f"must be a list of firmware inventory members, not {type(bmc['entries']).__name__}", BMC_FIX)
        check.fields(bmc, {"error": TEXT}, "bmc.", fix=BMC_FIX)
        if record.get("error"):
            continue  # its facts are not read
        facts = check.mapping(record.get("facts"), "facts")
        check.fields(facts, FACT_FIELDS, "facts.")
        for section, kinds in FACT_SECTIONS.items():
            check.fields(check.mapping(facts.get(section), f"facts.{section}"), kinds, f"facts.{section}.")
        for section, kinds in FACT_LISTS.items():
            for i, item in enumerate(check.mappings(facts.get(section), f"facts.{section}")):
                check.fields(item, kinds, f"facts.{section}[{i}].")
        critical = check.mapping(facts.get("xid"), "facts.xid").get("critical")
        if critical is not None and (not isinstance(critical, list) or not all(_IS[COUNT](code) for code in critical)):
            check.fail("facts.xid.critical", "must be a list of Xid codes (whole numbers)")


REDACTED = "********"


def _redact(value, secrets):
    """``value`` with every secret string replaced, in every string it holds (one pass over the record)."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {_redact(key, secrets): _redact(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(item, secrets) for item in value]
    return value


def _bmc_inventory_state(bmc):
    if not bmc:
        return "no BMC credentials"
    if bmc.get("error") or bmc.get("entries") is None:
        return "error: {}".format(bmc.get("error") or "no entries returned")[:300]
    return "read"


def _hardware(facts, bmc):
    """What the audit read of the node itself, BOM or not: enough to rebuild the node (a rehearsal copy, _rehearsal)."""
    driver = facts.get("driver") or {}
    nvswitch = facts.get("nvswitch") or {}
    fm = facts.get("fabricmanager") or {}
    inventory = None
    if bmc and isinstance(bmc.get("entries"), list):
        inventory = {e["Id"]: e.get("Version") for e in bmc["entries"] if isinstance(e, dict) and isinstance(e.get("Id"), str)}
    return {
        "kernel": facts.get("kernel"),
        "driver": {key: driver.get(key) for key in ("installed", "loaded", "version", "flavor")},
        "nvidia_smi": facts.get("nvidia_smi"),
        "gpu_count": facts.get("gpu_count"),
        "pci_gpu_count": facts.get("pci_gpu_count"),
        "gpus": [{key: gpu.get(key) for key in ("index", "name", "vbios_version")} for gpu in facts.get("gpus") or []],
        "nvswitch": {"present": nvswitch.get("present"), "count": nvswitch.get("count")},
        "fabricmanager": {key: fm.get(key) for key in ("installed", "version", "running")} if fm else None,
        "nics": [
            {key: nic.get(key) for key in ("pci", "type", "psid", "part_number", "fw_current", "query_failed")}
            for nic in facts.get("nics") or []
        ],
        "firmware_inventory": inventory,
        **_tray(facts),
    }


def _tray(facts):
    """A GB200/GB300 NVL72 tray's NVLink domain, IMEX version and CDMM mode (a rehearsal copy plays the same domains); {} elsewhere."""
    nvlink = facts.get("nvlink") or {}
    if nvlink.get("multi_node") is not True:
        return {}
    return {"nvlink": {"cluster_uuid": nvlink.get("cluster_uuid"), "clique_id": nvlink.get("clique_id")},
            "imex": (facts.get("imex") or {}).get("version"), "cdmm": (facts.get("cdmm") or {}).get("mode")}


def build_report(records, expected_hosts=None, title="GPU fleet audit", generated_at=None, secrets=None):
    """``records``: ``[{"name", "sku", "bom", "facts", "bmc"?}]`` (one per node that answered).

    ``bmc`` is what the node's BMC firmware inventory gave (see ``_bom.node_drift``); absent or None when no BMC
    credentials were set. Nodes in ``expected_hosts`` without a record are reported as unreachable. Every string in
    ``secrets`` (BMC passwords) is replaced by ``********`` wherever a record, the title or a host name holds it.
    RecordError (nothing to write) names the record and the field that the report cannot read, or a node given twice.
    """
    validate_records(records)
    secrets = sorted({s for s in secrets or [] if isinstance(s, str) and s}, key=len, reverse=True)
    records = [_redact(record, secrets) for record in records]  # once: the nodes and the SKU spread read the same copy
    title, generated_at, expected_hosts = _redact([title, generated_at, list(expected_hosts or [])], secrets)
    nodes = []
    for record in sorted(records, key=lambda r: r["name"]):
        if record.get("error"):
            nodes.append(_error_node(record))
            continue
        facts = record.get("facts") or {}
        bmc = record.get("bmc")
        items = node_drift(facts, record.get("bom") or {}, bmc=bmc)
        summary = drift_summary(items)
        driver = facts.get("driver") or {}
        bundle = next((i for i in items if i["component"] == "gpu_firmware"), None)
        nodes.append(
            {
                "name": record["name"],
                "sku": record.get("sku") or "unknown",
                "status": summary["status"],
                "counts": summary["counts"],
                "driver": driver.get("version"),
                "driver_flavor": driver.get("flavor"),
                "gpu_count": facts.get("gpu_count"),
                "critical_xids": (facts.get("xid") or {}).get("critical") or [],
                "gpu_firmware": bundle["installed"] if bundle else None,
                "bmc_inventory": _bmc_inventory_state(bmc),
                "items": items,
                "hardware": _hardware(facts, bmc),
            }
        )
    answered = {n["name"] for n in nodes}
    unreachable = sorted(set(expected_hosts or []) - answered)
    mixed = sku_mixed_versions([{"name": r["name"], "sku": r.get("sku"), "facts": r.get("facts")} for r in records if not r.get("error")])
    totals = {"nodes": len(nodes) + len(unreachable), "ok": 0, "drift": 0, "unknown": 0, "error": 0, "unreachable": len(unreachable)}
    for node in nodes:
        totals[node["status"]] += 1
    boms = {}  # per SKU, the BOM its nodes were compared with; a node whose own BOM differs keeps it as node["bom"]
    by_name = {n["name"]: n for n in nodes}
    for record in sorted(records, key=lambda r: r["name"]):
        if record.get("error") or record.get("bom") is None:
            continue
        sku = record.get("sku") or "unknown"
        if boms.setdefault(sku, record["bom"]) != record["bom"]:
            by_name[record["name"]]["bom"] = record["bom"]
    report = {
        "report_version": REPORT_VERSION,
        "title": title,
        "generated_at": generated_at,
        "totals": totals,
        "nodes": nodes,
        "unreachable": unreachable,
        "mixed_within_sku": mixed,
        "boms": boms,
    }
    domains = nvlink_domains(records)
    if domains["domains"] or domains["problems"]:  # GB200 / GB300 NVL72 trays; an HGX fleet's report is unchanged
        report["nvlink_domains"] = domains
    return report


def _error_node(record):
    """A node that answered but whose facts could not be gathered: the error is the finding."""
    return {
        "name": record["name"],
        "sku": record.get("sku") or "unknown",
        "status": "error",
        "error": record["error"],
        "counts": {},
        "driver": None,
        "driver_flavor": None,
        "gpu_count": None,
        "critical_xids": [],
        "gpu_firmware": None,
        "bmc_inventory": _bmc_inventory_state(record.get("bmc")),
        "items": [],
        "hardware": None,
    }


def render_json(report):
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def _fmt(value):
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def render_markdown(report):
    t = report["totals"]
    lines = [
        "# {}".format(report["title"]),
        "",
        "Generated {}.".format(report["generated_at"]) if report.get("generated_at") else "",
        "",
        "**{nodes} nodes: {ok} match their BOM, {drift} drift, {unknown} unknown, {error} could not be read, {unreachable} unreachable.**".format(**t),
        "",
        "| node | SKU | status | driver | GPUs | critical Xids | drifting components |",
        "|---|---|---|---|---|---|---|",
    ]
    for node in report["nodes"]:
        drifting = node.get("error") or ", ".join(i["component"] for i in node["items"] if i["status"] != "ok") or "—"
        lines.append(
            "| {} | {} | {} | {} | {} | {} | {} |".format(
                node["name"], node["sku"], node["status"], _fmt(node["driver"]), _fmt(node["gpu_count"]),
                ", ".join(str(x) for x in node["critical_xids"]) or "—", drifting,
            )
        )
    for name in report["unreachable"]:
        lines.append(f"| {name} | — | unreachable | — | — | — | — |")
    drift_nodes = [n for n in report["nodes"] if n["status"] != "ok"]
    if drift_nodes:
        lines += ["", "## Drift", "", "| node | component | installed | BOM wants | note |", "|---|---|---|---|---|"]
        for node in drift_nodes:
            for item in node["items"]:
                if item["status"] != "ok":
                    lines.append(
                        "| {} | {} | {} | {} | {} |".format(
                            node["name"], item["component"], _fmt(item["installed"]), _fmt(item["wanted"]), item.get("detail") or item["status"]
                        )
                    )
    if report["mixed_within_sku"]:
        lines += ["", "## Mixed versions within a SKU", ""]
        for sku, components in sorted(report["mixed_within_sku"].items()):
            for component, versions in sorted(components.items()):
                spread = "; ".join("{}: {}".format(v, ", ".join(nodes)) for v, nodes in versions.items())
                lines.append(f"- **{sku}** {component}: {spread}")
    lines += _markdown_nvlink(report.get("nvlink_domains"))
    return "\n".join(line for line in lines) + "\n"


def _markdown_nvlink(section):
    """The NVLink domains of GB200 / GB300 NVL72 trays: one line per domain, then every problem."""
    if not section:
        return []
    lines = ["", "## NVLink domains", "", "| ClusterUUID | inventory domain | trays | drivers | IMEX | IMEX domain |", "|---|---|---|---|---|---|"]
    for domain in section["domains"]:
        lines.append(
            "| {} | {} | {} | {} | {} | {} |".format(
                domain["cluster_uuid"], _fmt(domain["inventory_domain"]), ", ".join(domain["nodes"]),
                ", ".join(domain["drivers"]) or "—", ", ".join(domain["imex_versions"]) or "—", ", ".join(domain["imex_domain_states"]) or "—",
            )
        )
    if section["problems"]:
        lines += ["", "### NVLink domain problems", ""] + [f"- {problem}" for problem in section["problems"]]
    return lines


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}th{background:#f0f0f0}"
    ".ok{background:#e6f4ea}.drift{background:#fdecea}.error{background:#f8d7da}.unknown{background:#fff4e5}.unreachable{background:#eee;color:#777}"
)


def render_html(report):
    esc = html.escape
    t = report["totals"]
    rows = []
    for node in report["nodes"]:
        drifting = node.get("error") or ", ".join(i["component"] for i in node["items"] if i["status"] != "ok") or "—"
        rows.append(
            '<tr class="{s}"><td>{n}</td><td>{k}</td><td>{s}</td><td>{d}</td><td>{g}</td><td>{x}</td><td>{c}</td></tr>'.format(
                s=esc(node["status"]), n=esc(node["name"]), k=esc(node["sku"]), d=esc(_fmt(node["driver"])), g=esc(_fmt(node["gpu_count"])),
                x=esc(", ".join(str(x) for x in node["critical_xids"]) or "—"), c=esc(drifting),
            )
        )
    for name in report["unreachable"]:
        rows.append(f'<tr class="unreachable"><td>{esc(name)}</td><td colspan="6">unreachable</td></tr>')
    detail = []
    for node in report["nodes"]:
        for item in node["items"]:
            if item["status"] != "ok":
                detail.append(
                    '<tr class="{s}"><td>{n}</td><td>{c}</td><td>{i}</td><td>{w}</td><td>{note}</td></tr>'.format(
                        s=esc(item["status"]), n=esc(node["name"]), c=esc(item["component"]), i=esc(_fmt(item["installed"])),
                        w=esc(_fmt(item["wanted"])), note=esc(item.get("detail") or item["status"]),
                    )
                )
    mixed = []
    for sku, components in sorted(report["mixed_within_sku"].items()):
        for component, versions in sorted(components.items()):
            spread = "; ".join("{}: {}".format(v, ", ".join(nodes)) for v, nodes in versions.items())
            mixed.append(f"<li><b>{esc(sku)}</b> {esc(component)}: {esc(spread)}</li>")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>{}</title><style>{}</style></head><body>'.format(esc(report["title"]), _CSS),
        "<h1>{}</h1>".format(esc(report["title"])),
        "<p><b>{nodes} nodes: {ok} match their BOM, {drift} drift, {unknown} unknown, {error} could not be read, "
        "{unreachable} unreachable.</b></p>".format(**t),
        "<table><tr><th>node</th><th>SKU</th><th>status</th><th>driver</th><th>GPUs</th><th>critical Xids</th><th>drifting components</th></tr>",
        "\n".join(rows),
        "</table>",
    ]
    if detail:
        header = "<tr><th>node</th><th>component</th><th>installed</th><th>BOM wants</th><th>note</th></tr>"
        parts += ["<h2>Drift</h2><table>" + header, "\n".join(detail), "</table>"]
    if mixed:
        parts += ["<h2>Mixed versions within a SKU</h2><ul>", "\n".join(mixed), "</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


RENDERERS = {"json": render_json, "md": render_markdown, "html": render_html}
