# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout report: build it from per-node records and the wave plan; render JSON, Markdown, HTML, JUnit (private)."""

from __future__ import annotations

import datetime
import html
import json
import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.junit import junit_document
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import (
    FAILED_RESULTS,
    RESULTS,
    RecordError,
    redact,
    validate_records,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.timeline import render_timeline
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.record import phase_times

REPORT_VERSION = 1
# A node is done once the rollout decided about it (skipping it is a decision); not_started is not done.
FINISHED_RESULTS = ("upgraded", "unchanged", "rolled_back", "failed_drained", "skipped")
RESULT_WORDS = {
    "upgraded": "upgraded",
    "unchanged": "unchanged",
    "rolled_back": "rolled back",
    "failed_drained": "failed and left drained",
    "skipped": "skipped",
    "not_started": "not started",
}
EXTRA_TYPES = {"who": str, "failure_budget": int, "max_unavailable": (int, str), "stop_file": str, "stop_file_present": bool,
               "stopped_reason": str, "controller": str}
_BOOLEANS = {"true": True, "yes": True, "false": False, "no": False}


def wave_label(wave):
    if wave is None:
        return "not planned"
    return "canary" if wave == 0 else f"wave {wave}"


def _wave_key(wave):
    return (wave is None, wave or 0)


def iso(ts):
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration_text(seconds):
    if seconds is None:
        return "—"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _check_plan(plan):
    if not plan:
        return {}
    if not isinstance(plan, dict):
        raise RecordError(f"plan must be the gpufleet.lifecycle.wave_plan result (a mapping), not {type(plan).__name__}", field="plan")

    def names(value, field):
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise RecordError(f"plan.{field} must be a list of host names: pass the gpufleet.lifecycle.wave_plan result unchanged", field=f"plan.{field}")
        return list(value)

    out = dict(plan)
    out["canary"] = names(plan.get("canary") or [], "canary")
    waves = plan.get("waves") or []
    if not isinstance(waves, list):
        raise RecordError("plan.waves must be a list of lists of host names: pass the gpufleet.lifecycle.wave_plan result unchanged", field="plan.waves")
    out["waves"] = [names(w, f"waves[{i}]") for i, w in enumerate(waves)]
    budget = plan.get("budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise RecordError(f"plan.budget must be a count of nodes, not {type(budget).__name__}", field="plan.budget")
    notes = plan.get("notes") or []
    out["notes"] = [str(n) for n in notes] if isinstance(notes, list) else [str(notes)]
    return out


def _check_extra(extra):
    extra = dict(extra or {})
    # A templated value may arrive as text ("{{ gpufleet_failure_budget }}" on older ansible-core): read it, strictly.
    budget = extra.get("failure_budget")
    if isinstance(budget, str) and re.fullmatch(r"[0-9]{1,9}", budget):
        extra["failure_budget"] = int(budget)
    present = extra.get("stop_file_present")
    if isinstance(present, str) and present.lower() in _BOOLEANS:
        extra["stop_file_present"] = _BOOLEANS[present.lower()]
    for key, kind in EXTRA_TYPES.items():
        value = extra.get(key)
        if value is None:
            continue
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise RecordError(f"summary_extra.{key} must be {_kind_name(kind)}, not {type(value).__name__}", field=f"summary_extra.{key}")
    for key, value in extra.items():
        if isinstance(value, (dict, list)):
            raise RecordError(f"summary_extra.{key} must be a plain value (string, number, true/false), not {type(value).__name__}",
                              field=f"summary_extra.{key}")
    return extra


def _kind_name(kind):
    names = {str: "a string", int: "an integer", bool: "true or false"}
    if isinstance(kind, tuple):
        return " or ".join(names[k] for k in kind)
    return names[kind]


def _node_view(record):
    """The record plus what the report derives: start (its first step after the preflight: when it was admitted), end,
    duration, where its time went (``times``: queued, capacity, its own jobs, its own work, observation), why it failed
    or was skipped."""
    starts = [p["start"] for p in record["phases"]]
    ends = [p["end"] if p["end"] is not None else p["start"] for p in record["phases"]]
    times = phase_times(record["phases"])
    start = times.pop("start")
    if start is None:  # never admitted: its preflight is all it did
        start = min(starts) if starts else None
    end = max(ends) if ends else None
    failed = next((c for c in record["checks"] if c["status"] == "fail"), None)
    failed_phase = next((p for p in record["phases"] if p["status"] == "failed"), None)
    if record["rollback"]:
        reason = record["rollback"]["reason"]
    elif failed:
        reason = "{}: {}".format(failed["name"], failed["message"]) if failed["message"] else failed["name"]
    elif failed_phase:
        reason = "{} failed{}".format(failed_phase["name"], ": " + failed_phase["detail"] if failed_phase["detail"] else "")
    elif record["skip_reason"]:
        reason = record["skip_reason"]
    else:
        reason = ""
    view = dict(record)
    view.update(
        {
            "label": wave_label(record["wave"]),
            "start": start,
            "end": end,
            "duration_s": None if start is None else round(end - start, 3),
            "failed_check": "{}: {}".format(failed["name"], failed["message"]) if failed else None,
            "reason": reason,
            "times": times,
        }
    )
    return view


def duration_with_times(node):
    """The node's duration and, where its phases say, what it went to: ``6m 40s (queued 2m 00s · jobs 1m 30s · work 3m 10s)``."""
    times = node.get("times") or {}
    labels = (("queued_s", "queued"), ("capacity_s", "capacity"), ("jobs_s", "jobs"), ("work_s", "work"), ("observation_s", "soak"))
    parts = [f"{label} {duration_text(times[key])}" for key, label in labels if times.get(key) is not None]
    text = duration_text(node["duration_s"])
    return f"{text} ({' · '.join(parts)})" if parts and node["duration_s"] is not None else text


def _placeholder(node, wave, rollout_id):
    """A planned node the rollout sent no record for: reported as not started, never as done."""
    return {
        "node": node, "rollout_id": rollout_id, "wave": wave, "domain": {}, "result": "not_started", "before": {}, "after": {}, "phases": [],
        "checks": [], "rollback": None, "drain": None, "skip_reason": "no record from the rollout (planned, never reached)", "recorded": False,
    }


def build_report(records, rollout_id, plan=None, summary_extra=None, title="GPU fleet rollout", generated_at=None, secrets=()):
    """The report (a dict, what the JSON file holds); RecordError naming the node and field of a bad record.

    ``redactions`` in the result counts the credentials removed (URLs with ``user:password@``, the strings of ``secrets``).
    """
    secrets = sorted({s for s in secrets or () if isinstance(s, str) and s}, key=len, reverse=True)
    found = []
    checked = [dict(r, recorded=True) for r in validate_records(records, rollout_id)]
    checked = redact(checked, secrets, found)
    plan = redact(_check_plan(plan), secrets, found)
    extra = redact(_check_extra(summary_extra), secrets, found)
    title = redact(title, secrets, found)

    planned = {}
    if plan:
        for node in plan["canary"]:
            planned.setdefault(node, 0)
        for index, wave in enumerate(plan["waves"], start=1):
            for node in wave:
                planned.setdefault(node, index)
    have = {r["node"] for r in checked}
    checked += [_placeholder(node, wave, rollout_id) for node, wave in planned.items() if node not in have]
    nodes = [_node_view(r) for r in sorted(checked, key=lambda r: (_wave_key(r["wave"]), r["node"]))]

    waves = {}
    for node in nodes:
        wave = waves.setdefault(node["wave"], {"wave": node["wave"], "label": node["label"], "nodes": [], "counts": dict.fromkeys(RESULTS, 0)})
        wave["nodes"].append(node["node"])
        wave["counts"][node["result"]] += 1
    wave_list = []
    for key in sorted(waves, key=_wave_key):
        wave = waves[key]
        members = [n for n in nodes if n["wave"] == key]
        starts = [n["start"] for n in members if n["start"] is not None]
        ends = [n["end"] for n in members if n["end"] is not None]
        wave["planned"] = sum(1 for w in planned.values() if w == key) if plan else None
        wave["done"] = sum(wave["counts"][r] for r in FINISHED_RESULTS)
        wave["start"] = min(starts) if starts else None
        wave["end"] = max(ends) if ends else None
        wave_list.append(wave)

    counts = dict.fromkeys(RESULTS, 0)
    for node in nodes:
        counts[node["result"]] += 1
    # The rollout started with its first record (a preflight); a wave, with its first admitted node.
    starts = [p["start"] for n in nodes for p in n["phases"]]
    ends = [n["end"] for n in nodes if n["end"] is not None]
    started = min(starts) if starts else None
    ended = max(ends) if ends else None
    failed = sum(counts[r] for r in FAILED_RESULTS)
    budget = extra.get("failure_budget")
    planned_waves = (1 if plan.get("canary") else 0) + len(plan.get("waves") or []) if plan else None
    summary = dict(counts)
    summary.update(
        {
            "rollout_id": rollout_id,
            "nodes": len(nodes),
            "failed": failed,
            "failure_budget": budget,
            "failure_budget_exceeded": budget is not None and failed > budget,
            "who": extra.get("who"),
            "started": iso(started),
            "ended": iso(ended),
            "started_epoch": started,
            "ended_epoch": ended,
            "duration_s": None if started is None else round(ended - started, 3),
            "max_unavailable": extra.get("max_unavailable"),
            "unavailable_budget": plan.get("budget") if plan else None,
            "stop_file": extra.get("stop_file"),
            "stop_file_present": extra.get("stop_file_present"),
            "stopped_reason": extra.get("stopped_reason"),
            "waves_planned": planned_waves,
            "waves_done": sum(1 for w in wave_list if w["wave"] is not None and w["nodes"] and w["done"] == len(w["nodes"])),
            "redactions": len(found),
        }
    )
    others = {k: v for k, v in sorted(extra.items()) if k not in EXTRA_TYPES}
    return {
        "report_version": REPORT_VERSION,
        "title": title,
        "generated_at": generated_at,
        "rollout_id": rollout_id,
        "summary": summary,
        "extra": others,
        "plan_notes": plan.get("notes", []) if plan else [],
        "waves": wave_list,
        "nodes": nodes,
    }


def node_evidence(report):
    """``{node: JSON text}`` for the per-node files: the record as the rollout sent it (redacted), with what the report derived."""
    out = {}
    for node in report["nodes"]:
        if node.get("recorded"):
            out[node["node"]] = json.dumps(node, indent=2, sort_keys=True) + "\n"
    return out


# --------------------------------------------------------------------------- text helpers shared by the renderers


def version_change(node):
    """``driver 570.124.06 → 580.95.05; gpu_firmware ...``: the components that changed, else what is installed."""
    before, after = node["before"], node["after"]
    parts = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if key == "nic_firmware":
            for psid in sorted(set(old or {}) | set(new or {})):
                a, b = (old or {}).get(psid), (new or {}).get(psid)
                if a != b:
                    parts.append(f"nic {psid} {a or '—'} → {b or '—'}")
        elif old != new:
            parts.append(f"{key} {old or '—'} → {new or '—'}")
    if parts:
        return "; ".join(parts)
    driver = after.get("driver") or before.get("driver")
    if not driver:
        return "—"
    return f"driver {driver} (restored)" if node["result"] == "rolled_back" else f"driver {driver} (no change)"


def headline(summary):
    words = ", ".join(f"{summary[r]} {RESULT_WORDS[r]}" for r in RESULTS if summary[r] or r in ("upgraded", "rolled_back"))
    return f"{summary['nodes']} nodes: {words}."


def budget_text(summary):
    failed, budget = summary["failed"], summary["failure_budget"]
    if budget is None:
        return f"{_nodes(failed)} failed (no failure budget given)"
    if summary["failure_budget_exceeded"]:
        return f"{_nodes(failed)} failed, {budget} allowed: exceeded"
    return f"{_nodes(failed)} failed of {budget} allowed"


def _nodes(count):
    return f"{count} node" if count == 1 else f"{count} nodes"


def stop_file_text(summary):
    if not summary["stop_file"]:
        return "not given"
    if summary["stop_file_present"] is None:
        return f"{summary['stop_file']} (state not given)"
    if summary["stop_file_present"]:
        return f"{summary['stop_file']} is present: no new node was started; remove it and run the playbook again to resume"
    return f"{summary['stop_file']} absent"


def unavailable_text(summary):
    spec, budget = summary["max_unavailable"], summary["unavailable_budget"]
    if spec is None and budget is None:
        return "not given"
    if budget is None:
        return str(spec)
    return _nodes(budget) + (f" ({spec})" if spec is not None and str(spec) != str(budget) else "")


def waves_text(report):
    summary = report["summary"]
    planned = summary["waves_planned"]
    return "{} done of {}".format(summary["waves_done"], planned if planned is not None else "? (no plan given)")


def summary_items(report):
    """``[(label, text)]``: the summary lines, in the order both Markdown and HTML show them."""
    s = report["summary"]
    items = [
        ("rollout", s["rollout_id"]),
        ("run by", s["who"] or "not given"),
        ("started", s["started"] or "—"),
        ("ended", s["ended"] or "—"),
        ("duration", duration_text(s["duration_s"])),
        ("waves (canary included)", waves_text(report)),
        ("failure budget", budget_text(s)),
        ("unavailable budget", unavailable_text(s)),
        ("stop file", stop_file_text(s)),
    ]
    if s["stopped_reason"]:
        items.append(("stopped", s["stopped_reason"]))
    items += [(str(k), str(v)) for k, v in report["extra"].items()]
    if s["redactions"]:
        items.append(("redacted", f"{s['redactions']} credentials found in the records were removed"))
    return items


def failures(report):
    return [n for n in report["nodes"] if n["result"] in FAILED_RESULTS]


def decided_text(node):
    rollback = node["rollback"]
    if rollback:
        verdict = "validated after rollback" if rollback["result"] == "validated" else "rollback failed"
        return rollback["decided_by"], verdict
    return "—", "no rollback"


def drain_text(node):
    drain = node["drain"]
    if not drain:
        return "—"
    return "{}{}".format("ours" if drain["ours"] else "someone else's", ": " + drain["reason"] if drain["reason"] else "")


# --------------------------------------------------------------------------- renderers


def render_json(report):
    """Indented, except that each node is one line: Python's C encoder does not indent, and 10,000 nodes indented take seconds."""
    head = dict(report, nodes=[])
    text = json.dumps(head, indent=2, sort_keys=True)
    marker = '\n  "nodes": []'  # the top-level key: a string in JSON holds no raw newline, a nested key is indented deeper
    if not report["nodes"]:
        return text + "\n"
    nodes = ",\n".join("    " + json.dumps(node, sort_keys=True) for node in report["nodes"])
    return text.replace(marker, '\n  "nodes": [\n' + nodes + "\n  ]", 1) + "\n"


def _md(text):
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def render_markdown(report):
    s = report["summary"]
    lines = [f"# {_md(report['title'])}", ""]
    if report.get("generated_at"):
        lines += [f"Generated {_md(report['generated_at'])}.", ""]
    lines += [f"**{headline(s)}**", ""]
    lines += [f"- **{_md(label)}**: {_md(text)}" for label, text in summary_items(report)]
    lines += [f"- plan note: {_md(note)}" for note in report["plan_notes"]]
    lines += ["", "## Waves", "", "| wave | planned | nodes | done | " + " | ".join(RESULT_WORDS[r] for r in RESULTS) + " | started | duration |",
              "|---" * (6 + len(RESULTS)) + "|"]
    for wave in report["waves"]:
        span = None if wave["start"] is None else wave["end"] - wave["start"]
        lines.append(
            "| {} | {} | {} | {} | {} | {} | {} |".format(
                wave["label"], "—" if wave["planned"] is None else wave["planned"], len(wave["nodes"]), wave["done"],
                " | ".join(str(wave["counts"][r]) for r in RESULTS), iso(wave["start"]) or "—", duration_text(span),
            )
        )
    by_wave = {}
    for node in report["nodes"]:
        by_wave.setdefault(node["wave"], []).append(node)
    for wave in report["waves"]:
        members = by_wave[wave["wave"]]
        lines += ["", f"## {wave['label'].capitalize()} ({len(members)} node{'s' if len(members) != 1 else ''})", "",
                  "| node | result | versions (before → after) | duration (queued · capacity · jobs · work · soak) | failed check / reason |",
                  "|---|---|---|---|---|"]
        for node in members:
            lines.append(
                "| {} | {} | {} | {} | {} |".format(
                    _md(node["node"]), RESULT_WORDS[node["result"]], _md(version_change(node)), duration_with_times(node),
                    _md(node["reason"] or "—"),
                )
            )
    failed = failures(report)
    lines += ["", "## Rollbacks and failures", ""]
    if not failed:
        lines.append("No node failed.")
    else:
        lines += ["| node | wave | result | decided by | reason | outcome | drain |", "|---|---|---|---|---|---|---|"]
        for node in failed:
            decided, verdict = decided_text(node)
            lines.append(
                "| {} | {} | {} | {} | {} | {} | {} |".format(
                    _md(node["node"]), node["label"], RESULT_WORDS[node["result"]], _md(decided), _md(node["reason"] or "—"), verdict,
                    _md(drain_text(node)),
                )
            )
    skipped = [n for n in report["nodes"] if n["result"] == "skipped"]
    if skipped:
        lines += ["", "## Skipped nodes", ""]
        lines += [f"- **{_md(n['node'])}** ({n['label']}): {_md(n['reason'] or 'no reason given')}" for n in skipped]
    return "\n".join(lines) + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f0f0f0}"
    ".upgraded{background:#e6f4ea}.unchanged{background:#f4f8fb}.rolled_back{background:#fdecea}.failed_drained{background:#f8d7da}"
    ".skipped{background:#fff4e5}.not_started{background:#eee;color:#777}dl.summary{display:grid;grid-template-columns:max-content auto;"
    "gap:.2em 1em}dl.summary dt{font-weight:bold}dl.summary dd{margin:0}"
)


def render_html(report):
    esc = html.escape
    s = report["summary"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>{}</title><style>{}</style></head><body>'.format(esc(report["title"]), _CSS),
        "<h1>{}</h1>".format(esc(report["title"])),
    ]
    if report.get("generated_at"):
        parts.append("<p>Generated {}.</p>".format(esc(report["generated_at"])))
    parts.append(f"<p><b>{esc(headline(s))}</b></p>")
    # The chart first: it is what a reader looks at; the summary's details follow.
    parts.append(render_timeline(report))
    parts.append("<h2>Summary</h2>")
    parts.append('<dl class="summary">' + "".join(f"<dt>{esc(label)}</dt><dd>{esc(text)}</dd>" for label, text in summary_items(report)) + "</dl>")
    if report["plan_notes"]:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in report["plan_notes"]) + "</ul>")
    parts.append("<h2>Waves</h2><table><tr><th>wave</th><th>planned</th><th>nodes</th><th>done</th>"
                 + "".join(f"<th>{esc(RESULT_WORDS[r])}</th>" for r in RESULTS) + "<th>started</th><th>duration</th></tr>")
    for wave in report["waves"]:
        span = None if wave["start"] is None else wave["end"] - wave["start"]
        parts.append(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}<td>{}</td><td>{}</td></tr>".format(
                esc(wave["label"]), "—" if wave["planned"] is None else wave["planned"], len(wave["nodes"]), wave["done"],
                "".join(f"<td>{wave['counts'][r]}</td>" for r in RESULTS), esc(iso(wave["start"]) or "—"), esc(duration_text(span)),
            )
        )
    parts.append("</table>")
    by_wave = {}
    for node in report["nodes"]:
        by_wave.setdefault(node["wave"], []).append(node)
    for wave in report["waves"]:
        members = by_wave[wave["wave"]]
        parts.append("<h2>{} ({} node{})</h2>".format(esc(wave["label"].capitalize()), len(members), "s" if len(members) != 1 else ""))
        parts.append("<table><tr><th>node</th><th>result</th><th>versions (before → after)</th><th>duration (queued · capacity · jobs · work · soak)</th>"
                     "<th>failed check / reason</th></tr>")
        parts.extend(
            '<tr class="{r}"><td>{n}</td><td>{w}</td><td>{v}</td><td>{d}</td><td>{why}</td></tr>'.format(
                r=node["result"], n=esc(node["node"]), w=esc(RESULT_WORDS[node["result"]]), v=esc(version_change(node)),
                d=esc(duration_with_times(node)), why=esc(node["reason"] or "—"),
            )
            for node in members
        )
        parts.append("</table>")
    parts.append("<h2>Rollbacks and failures</h2>")
    failed = failures(report)
    if not failed:
        parts.append("<p>No node failed.</p>")
    else:
        parts.append("<table><tr><th>node</th><th>wave</th><th>result</th><th>decided by</th><th>reason</th><th>outcome</th><th>drain</th></tr>")
        for node in failed:
            decided, verdict = decided_text(node)
            parts.append(
                '<tr class="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>'.format(
                    node["result"], esc(node["node"]), esc(node["label"]), esc(RESULT_WORDS[node["result"]]), esc(decided),
                    esc(node["reason"] or "—"), esc(verdict), esc(drain_text(node)),
                )
            )
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_junit(report):
    """A test suite per wave, a test case per node (time: the node's duration); failure for a failed node, skipped for a skipped one."""
    suites = ET.Element("testsuites", name=report["title"])
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    by_wave = {}
    for node in report["nodes"]:
        by_wave.setdefault(node["wave"], []).append(node)
    for wave in report["waves"]:
        suite = ET.SubElement(suites, "testsuite", name=f"{report['rollout_id']} {wave['label']}", id=str(len(suites)),
                              package=f"rollout.{report['rollout_id']}")
        if wave["start"] is not None:
            suite.set("timestamp", iso(wave["start"]).rstrip("Z"))  # the schema's ISO 8601 time, without a zone: UTC
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        suite_time = 0.0
        for node in by_wave[wave["wave"]]:
            seconds = node["duration_s"] or 0.0
            case = ET.SubElement(suite, "testcase", classname=f"rollout.{report['rollout_id']}.{wave['label'].replace(' ', '_')}",
                                 name=node["node"], time=f"{seconds:.3f}")
            counts["tests"] += 1
            suite_time += seconds
            if node["result"] in FAILED_RESULTS:
                counts["failures"] += 1
                message = "{}: {}".format(RESULT_WORDS[node["result"]], node["reason"] or "no reason given")
                decided, verdict = decided_text(node)
                ET.SubElement(case, "failure", message=message, type=node["result"]).text = (
                    f"decided by: {decided}\noutcome: {verdict}\ndrain: {drain_text(node)}\nversions: {version_change(node)}"
                )
            elif node["result"] in ("skipped", "not_started"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="{}: {}".format(RESULT_WORDS[node["result"]], node["reason"] or "no reason given"))
            else:
                ET.SubElement(case, "system-out").text = "{}: {}".format(RESULT_WORDS[node["result"]], version_change(node))
        for key, value in counts.items():
            suite.set(key, str(value))
            total[key] += value
        suite.set("time", f"{suite_time:.3f}")
        total_time += suite_time
    for key, value in total.items():
        suites.set(key, str(value))
    suites.set("time", f"{total_time:.3f}")
    return junit_document(suites)


RENDERERS = {"json": render_json, "markdown": render_markdown, "html": render_html, "junit": render_junit}
# (basename, extension) of each format's file in dest.
FILES = {"json": ("rollout-report", "json"), "markdown": ("rollout-report", "md"), "html": ("rollout-report", "html"), "junit": ("rollout-junit", "xml")}

__all__ = ["FILES", "RENDERERS", "RecordError", "build_report", "node_evidence"]
