# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet validation report: build it from per-node gpu_validate results, render JSON, Markdown, HTML, JUnit XML (private)."""

from __future__ import annotations

import html
import json
import math
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.junit import junit_document
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import RecordError, _Checker, named_entries
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.common import FAIL, PASS, STATUSES, WARN, overall_status, summarize

REPORT_VERSION = 1
STRAGGLER_NUMBERS = ("value", "median", "deficit_pct", "tolerance_pct")


class _Entry(_Checker):
    """rollout_records' checker for one entry of ``nodes`` (or ``stragglers``), with numbers."""

    def __init__(self, node, index, option="nodes"):
        super().__init__(node, index, option, (
            "pass the output of the gpufleet.lifecycle.stragglers filter" if option == "stragglers"
            else "pass each node's registered gpufleet.lifecycle.gpu_validate result (docs/gpu_validate.md)"
        ))

    def number(self, value, field):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(field, f"must be a number, not {type(value).__name__}")
        if not math.isfinite(value):
            self.fail(field, f"is {value}: a finite number expected")
        return value


def _check_result(check, value, field):
    """One check result of gpu_validate, with the keys a report reads (message, observed, expected) filled in."""
    if not isinstance(value, dict):
        check.fail(field, f"must be a mapping (a check result), not {type(value).__name__}")
    for key in ("name", "status"):
        if key not in value:
            check.fail(f"{field}.{key}", f"is missing from {field} (required: name, status)")
    return dict(
        value,
        name=check.text(value["name"], f"{field}.name", optional=False),
        status=check.choice(value["status"], STATUSES, f"{field}.status"),
        message=check.text(value.get("message"), f"{field}.message") or "",
        observed=value.get("observed"),
        expected=value.get("expected"),
    )


def validate_nodes(records):
    """``records`` with each gpu_validate result checked and its checks completed; RecordError naming the entry, the
    node and the field of the first that is not a gpu_validate result, or of a node given twice."""
    out = []
    for record, check in named_entries(records, _Entry, "name and result"):
        result = check.mapping(record.get("result"), "result")
        checks = result.get("checks")
        if checks is not None and not isinstance(checks, list):
            check.fail("result.checks", f"must be a list of check results, not {type(checks).__name__}")
        result = dict(
            result,
            checks=[_check_result(check, item, f"result.checks[{i}]") for i, item in enumerate(checks or [])],
            status=None if result.get("status") is None else check.choice(result["status"], (PASS, WARN, FAIL), "result.status"),
            level=check.text(result.get("level"), "result.level"),
            summary=check.mapping(result.get("summary"), "result.summary"),
            measurements=check.mapping(result.get("measurements"), "result.measurements"),
            msg=check.text(result.get("msg"), "result.msg"),
        )
        out.append(dict(record, result=result))
    return out


def validate_stragglers(stragglers):
    """The stragglers filter's flags, checked; RecordError naming the flag and the field of the first that is not one."""
    for index, flag in enumerate(stragglers):
        name = flag.get("name") if isinstance(flag, dict) else None
        check = _Entry(name if isinstance(name, str) else None, index, option="stragglers")
        if not isinstance(flag, dict):
            check.fail("the entry", f"must be a mapping, not {type(flag).__name__}")
        missing = [key for key in ("name", "metric", *STRAGGLER_NUMBERS) if key not in flag]
        if missing:
            check.fail(missing[0], "is missing: the entry lacks {}".format(", ".join(missing)))
        check.text(flag["name"], "name", optional=False)
        check.text(flag["metric"], "metric", optional=False)
        for key in STRAGGLER_NUMBERS:
            check.number(flag[key], key)
    return stragglers


def _compact(value):
    """observed / expected as one short line."""
    if value is None:
        return "—"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def build_report(records, expected_hosts=None, stragglers=None, title="GPU fleet validation", generated_at=None):
    """``records``: ``[{"name", "result"}]`` with a gpu_validate result each; ``stragglers``: the stragglers filter's output.

    RecordError (nothing to write) naming the entry and the field of one that is not that, or of a node given twice.
    """
    records = validate_nodes(records)
    stragglers = validate_stragglers(stragglers or [])
    by_node = {}
    for flag in stragglers:
        by_node.setdefault(flag["name"], []).append(flag)
    nodes = []
    for record in sorted(records, key=lambda r: r["name"]):
        result = record.get("result") or {}
        checks = result.get("checks") or []
        status = result.get("status") or (overall_status(checks) if checks else "fail")
        node = {
            "name": record["name"],
            "status": status,
            "level": result.get("level"),
            "summary": result.get("summary") or summarize(checks),
            "failed_checks": [c["name"] for c in checks if c["status"] == "fail"],
            "checks": checks,
            "measurements": result.get("measurements") or {},
            "stragglers": by_node.get(record["name"], []),
        }
        if not checks:
            node["error"] = result.get("msg") or "no validation result"
        nodes.append(node)
    answered = {n["name"] for n in nodes}
    unreachable = sorted(set(expected_hosts or []) - answered)
    totals = {"nodes": len(nodes) + len(unreachable), "unreachable": len(unreachable), "stragglers": sum(1 for n in nodes if n["stragglers"])}
    totals.update(dict.fromkeys(("pass", "warn", "fail"), 0))
    for node in nodes:
        totals[node["status"] if node["status"] in totals else "fail"] += 1
    return {
        "report_version": REPORT_VERSION,
        "title": title,
        "generated_at": generated_at,
        "totals": totals,
        "nodes": nodes,
        "unreachable": unreachable,
        "stragglers": sorted(stragglers or [], key=lambda f: (f["name"], f["metric"])),
    }


def render_json(report):
    return json.dumps(report, indent=2, sort_keys=True, default=str) + "\n"


def _headline(report):
    t = report["totals"]
    return "{nodes} nodes: {pass} pass, {warn} warn, {fail} fail, {unreachable} unreachable; {stragglers} stragglers.".format(**t)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report):
    lines = ["# {}".format(report["title"]), ""]
    if report.get("generated_at"):
        lines += ["Generated {}.".format(report["generated_at"]), ""]
    lines += [
        f"**{_headline(report)}**",
        "",
        "| node | status | level | failed checks | busbw GB/s | slowest GPU Gflop/s | straggler |",
        "|---|---|---|---|---|---|---|",
    ]
    for node in report["nodes"]:
        m = node["measurements"]
        lines.append(
            "| {} | {} | {} | {} | {} | {} | {} |".format(
                node["name"], node["status"], node["level"] or "—", ", ".join(node["failed_checks"]) or "—",
                _compact(m.get("busbw_gbps")), _compact(m.get("gflops_min")), ", ".join(f["metric"] for f in node["stragglers"]) or "—",
            )
        )
    for name in report["unreachable"]:
        lines.append(f"| {name} | unreachable | — | — | — | — | — |")
    failing = [(n, c) for n in report["nodes"] for c in n["checks"] if c["status"] in ("fail", "warn")]
    if failing:
        lines += ["", "## Failed and warning checks", "", "| node | check | status | observed | expected | message |", "|---|---|---|---|---|---|"]
        for node, check in failing:
            lines.append(
                "| {} | {} | {} | {} | {} | {} |".format(
                    node["name"], check["name"], check["status"],
                    _cell(_compact(check["observed"])), _cell(_compact(check["expected"])), _cell(check["message"]),
                )
            )
    errors = [n for n in report["nodes"] if n.get("error")]
    if errors:
        lines += ["", "## Nodes without a result", ""] + ["- **{}**: {}".format(n["name"], n["error"]) for n in errors]
    if report["stragglers"]:
        lines += ["", "## Stragglers", "", "| node | metric | value | fleet median | below median |", "|---|---|---|---|---|"]
        for flag in report["stragglers"]:
            lines.append("| {name} | {metric} | {value:g} | {median:g} | {deficit_pct:g}% |".format(**flag))
    return "\n".join(lines) + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f0f0f0}"
    ".pass{background:#e6f4ea}.fail{background:#fdecea}.warn{background:#fff4e5}.skip,.unreachable{background:#eee;color:#777}"
    "code{font-size:.85em}"
)


def render_html(report):
    esc = html.escape
    rows = []
    for node in report["nodes"]:
        m = node["measurements"]
        rows.append(
            '<tr class="{s}"><td>{n}</td><td>{s}</td><td>{lv}</td><td>{f}</td><td>{b}</td><td>{g}</td><td>{st}</td></tr>'.format(
                s=esc(node["status"]), n=esc(node["name"]), lv=esc(node["level"] or "—"), f=esc(", ".join(node["failed_checks"]) or "—"),
                b=esc(_compact(m.get("busbw_gbps"))), g=esc(_compact(m.get("gflops_min"))),
                st=esc(", ".join(f["metric"] for f in node["stragglers"]) or "—"),
            )
        )
    for name in report["unreachable"]:
        rows.append(f'<tr class="unreachable"><td>{esc(name)}</td><td colspan="6">unreachable</td></tr>')
    detail = []
    for node in report["nodes"]:
        for check in node["checks"]:
            detail.append(
                '<tr class="{s}"><td>{n}</td><td>{c}</td><td>{s}</td><td><code>{o}</code></td><td><code>{e}</code></td><td>{m}</td></tr>'.format(
                    s=esc(check["status"]), n=esc(node["name"]), c=esc(check["name"]), o=esc(_compact(check["observed"])),
                    e=esc(_compact(check["expected"])), m=esc(check["message"]),
                )
            )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>{}</title><style>{}</style></head><body>'.format(esc(report["title"]), _CSS),
        "<h1>{}</h1>".format(esc(report["title"])),
    ]
    if report.get("generated_at"):
        parts.append("<p>Generated {}.</p>".format(esc(report["generated_at"])))
    parts += [
        f"<p><b>{esc(_headline(report))}</b></p>",
        "<table><tr><th>node</th><th>status</th><th>level</th><th>failed checks</th><th>busbw GB/s</th><th>slowest GPU Gflop/s</th>"
        "<th>straggler</th></tr>",
        "\n".join(rows),
        "</table>",
    ]
    if report["stragglers"]:
        parts.append("<h2>Stragglers</h2><table><tr><th>node</th><th>metric</th><th>value</th><th>fleet median</th><th>below median</th></tr>")
        for flag in report["stragglers"]:
            parts.append(
                '<tr class="fail"><td>{}</td><td>{}</td><td>{:g}</td><td>{:g}</td><td>{:g}%</td></tr>'.format(
                    esc(flag["name"]), esc(flag["metric"]), flag["value"], flag["median"], flag["deficit_pct"]
                )
            )
        parts.append("</table>")
    if detail:
        parts += [
            "<h2>Every check</h2><table><tr><th>node</th><th>check</th><th>status</th><th>observed</th><th>expected</th><th>message</th></tr>",
            "\n".join(detail),
            "</table>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_junit(report):
    """One test suite per node, one test case per check (warn: passed, with the message in system-out)."""
    suites = ET.Element("testsuites", name=report["title"])
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for node in report["nodes"]:
        suite = ET.SubElement(suites, "testsuite", name=node["name"])
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for check in node["checks"]:
            case = ET.SubElement(suite, "testcase", classname=f"gpu_validate.{node['name']}", name=check["name"], time="0")
            counts["tests"] += 1
            detail = "observed: {}\nexpected: {}".format(_compact(check["observed"]), _compact(check["expected"]))
            if check["status"] == "fail":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=check["message"], type="fail").text = detail
            elif check["status"] == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=check["message"])
            else:
                ET.SubElement(case, "system-out").text = "{}: {}\n{}".format(check["status"], check["message"], detail)
        if node.get("error"):
            case = ET.SubElement(suite, "testcase", classname=f"gpu_validate.{node['name']}", name="gpu_validate", time="0")
            counts["tests"] += 1
            counts["errors"] += 1
            ET.SubElement(case, "error", message=node["error"], type="error")
        for flag in node["stragglers"]:
            case = ET.SubElement(suite, "testcase", classname=f"gpu_validate.{node['name']}", name="straggler_" + flag["metric"], time="0")
            counts["tests"] += 1
            counts["failures"] += 1
            message = "{metric} {value:g} is {deficit_pct:g}% below the fleet median {median:g} (tolerance {tolerance_pct:g}%)".format(**flag)
            ET.SubElement(case, "failure", message=message, type="straggler")
        for key, value in counts.items():
            suite.set(key, str(value))
            total[key] += value
    for name in report["unreachable"]:
        suite = ET.SubElement(suites, "testsuite", name=name, tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname=f"gpu_validate.{name}", name="reachable", time="0")
        ET.SubElement(case, "error", message="the node was unreachable or sent no validation result", type="unreachable")
        total["tests"] += 1
        total["errors"] += 1
    for key, value in total.items():
        suites.set(key, str(value))
    return junit_document(suites)


RENDERERS = {"json": render_json, "md": render_markdown, "html": render_html, "junit": render_junit}
# File name extension of each format.
EXTENSIONS = {"json": "json", "md": "md", "html": "html", "junit": "junit.xml"}

__all__ = ["EXTENSIONS", "RENDERERS", "STATUSES", "RecordError", "build_report"]
