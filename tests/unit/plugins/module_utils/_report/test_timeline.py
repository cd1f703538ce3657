"""The timeline chart's geometry: a row per node, a bar per phase where its times say, failures marked, waves drawn."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report import rollout, timeline
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import PHASES
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import T0, sample_rollout

RID = "r-1"
SVG = "{http://www.w3.org/2000/svg}"


def chart_of(report):
    page = timeline.render_timeline(report)
    svg = re.search(r'<svg class="timeline".*?</svg>', page, re.DOTALL).group(0)
    axis = re.search(r'<svg class="axis".*?</svg>', page, re.DOTALL).group(0)
    return ET.fromstring(svg), ET.fromstring(axis)  # noqa: S314 - our own output


def build(count=24, **kwargs):
    records, plan = sample_rollout(count, rollout_id=RID, **kwargs)
    return rollout.build_report(records, RID, plan=plan)


def rects(svg, cls):
    return [r for r in svg.iter(SVG + "rect") if cls in (r.get("class") or "").split()]


def test_a_bar_per_phase_coloured_by_phase_where_its_times_say():
    report = build(rollback=("gpu-07",))
    svg, _axis = chart_of(report)
    bars = rects(svg, "phase")
    assert len(bars) == sum(len(n["phases"]) for n in report["nodes"])
    scale = timeline.PLOT_W / (report["summary"]["ended_epoch"] - T0)
    first = report["nodes"][0]["phases"][0]
    first_bar = bars[0]
    assert first_bar.get("fill") == timeline.PHASE_COLOURS[first["name"]]
    assert float(first_bar.get("x")) == pytest.approx(timeline.LABEL_W + (first["start"] - T0) * scale, abs=0.1)
    assert float(first_bar.get("width")) == pytest.approx((first["end"] - first["start"]) * scale, abs=0.1)
    for rect in bars:
        name = rect.get("class").split()[1]
        assert rect.get("fill") == timeline.PHASE_COLOURS[name]
        assert timeline.LABEL_W <= float(rect.get("x")) and float(rect.get("x")) + float(rect.get("width")) <= timeline.LABEL_W + timeline.PLOT_W + 1.6


def test_phase_colours_are_distinct_and_never_the_failure_red():
    colours = list(timeline.PHASE_COLOURS.values())
    assert len(set(colours)) == len(colours) == len(PHASES) == 12 and timeline.FAILURE_RED not in colours
    assert tuple(timeline.PHASE_COLOURS) == PHASES


def test_rows_grouped_by_wave_canary_first_and_never_overlapping():
    report = build(1000, rollback=("gpu-0007",), skipped=("gpu-0500",))
    svg, _axis = chart_of(report)
    labels = [t for t in svg.iter(SVG + "text") if t.get("font-weight") is None and t.get("font-style") is None and float(t.get("x")) == 4]
    names = [t.find(SVG + "title").tail for t in labels]  # <text><title>tooltip</title>shown name</text>
    assert len(labels) == 1000
    assert [t.find(SVG + "title").text.split(":")[0] for t in labels] == [n["node"] for n in report["nodes"]]
    assert names[:2] == ["gpu-0001", "gpu-0002"]  # the canary's row comes first
    ys = [float(t.get("y")) for t in labels]
    assert all(b - a >= timeline.ROW_H for a, b in zip(ys, ys[1:]))
    assert float(svg.get("height")) >= ys[-1] + 4
    headers = [t.text for t in svg.iter(SVG + "text") if t.get("font-weight") == "bold"]
    assert headers == [f"{w['label']} ({len(w['nodes'])})" for w in report["waves"]] and headers[0] == "canary (1)"


def test_failed_phase_outlined_red_and_a_marker_in_the_failed_nodes_row():
    report = build(rollback=("gpu-07",), drained=("gpu-05",))
    svg, _axis = chart_of(report)
    failed = rects(svg, "failed")
    assert len(failed) == 3  # gpu-05: validate and rollback; gpu-07: validate
    assert all(r.get("stroke") == timeline.FAILURE_RED and r.get("fill") == "url(#hatch)" for r in failed)
    markers = [p for p in svg.iter(SVG + "path") if p.get("class") == "failure-marker"]
    assert [m.find(SVG + "title").text.split(":")[0] for m in markers] == ["gpu-05", "gpu-07"]
    row_y = {t.find(SVG + "title").text.split(":")[0]: float(t.get("y")) - 12 for t in svg.iter(SVG + "text") if t.find(SVG + "title") is not None}
    scale = timeline.PLOT_W / (report["summary"]["ended_epoch"] - T0)
    node = next(n for n in report["nodes"] if n["node"] == "gpu-07")
    rollback = next(p for p in node["phases"] if p["name"] == "rollback")
    numbers = [float(v) for v in re.findall(r"[-\d.]+", markers[1].get("d"))]
    assert numbers[0] == pytest.approx(timeline.LABEL_W + (rollback["start"] - T0) * scale, abs=0.1)
    assert row_y["gpu-07"] <= numbers[1] and numbers[5] <= row_y["gpu-07"] + timeline.ROW_H


def test_no_marker_without_a_failure():
    svg, _axis = chart_of(build())
    assert not [p for p in svg.iter(SVG + "path") if p.get("class") == "failure-marker"] and not rects(svg, "failed")


def test_wave_boundaries_at_each_waves_start_with_labels():
    report = build(rollback=("gpu-07",))
    svg, _axis = chart_of(report)
    lines = [line for line in svg.iter(SVG + "line") if line.get("class") == "wave-boundary"]
    scale = timeline.PLOT_W / (report["summary"]["ended_epoch"] - T0)
    assert [float(line.get("x1")) for line in lines] == pytest.approx([timeline.LABEL_W + (w["start"] - T0) * scale for w in report["waves"]], abs=0.1)
    texts = ["".join(t.itertext()) for t in svg.iter(SVG + "text")]
    # The canary starts when it is admitted, after its 20 s preflight (the rollout's start).
    assert "canary starts, 0.3 min" in texts and any(t.startswith("wave 3 starts, ") for t in texts)


@pytest.mark.parametrize(("span", "step"), [(60, 15), (600, 60), (6120, 600), (3600 * 30, 10800), (86400 * 30, 86400 * 3)])
def test_tick_step_keeps_at_most_12_ticks(span, step):
    assert timeline.tick_step(span) == step
    assert span / timeline.tick_step(span) <= 12


def test_axis_ticks_in_minutes():
    report = build()
    _svg, axis = chart_of(report)
    labels = [t.text for t in axis.iter(SVG + "text")][1:]
    span = report["summary"]["ended_epoch"] - T0
    step = timeline.tick_step(span)
    assert labels[0] == "0 min" and labels[1] == f"{step / 60:g} min" and len(labels) == int(span // step) + 1


def test_long_names_are_shortened_with_the_full_name_in_the_tooltip():
    records, plan = sample_rollout(2, rollout_id=RID)
    records[1]["node"] = "gpu-node-with-a-very-long-name-0001.example.org"
    plan["waves"][0] = [records[1]["node"]]
    svg, _axis = chart_of(rollout.build_report(records, RID, plan=plan))
    label = next(t for t in svg.iter(SVG + "text") if (t.find(SVG + "title") is not None and "very-long" in t.find(SVG + "title").text))
    shown = "".join(label.itertext()).replace(label.find(SVG + "title").text, "")
    assert len(shown) == timeline.NAME_CHARS and shown.endswith("…")


def test_no_phase_at_all_says_so():
    records, plan = sample_rollout(2, rollout_id=RID)
    for record in records:
        record["phases"] = []
        record["result"] = "not_started"
    assert "nothing to draw" in timeline.render_timeline(rollout.build_report(records, RID, plan=plan))


def test_wave_lines_lie_under_bars_and_text_and_over_the_row_stripes():
    svg, _axis = chart_of(build(rollback=("gpu-07",)))
    order = list(svg)
    kinds = ["line" if e.get("class") == "wave-boundary" else "stripe" if e.get("fill") in ("#f6f6f6", "#eef1f6") else
             "bar" if "phase" in (e.get("class") or "") else "text" if e.tag == SVG + "text" else "other" for e in order]
    first_line, last_line = kinds.index("line"), len(kinds) - 1 - kinds[::-1].index("line")
    assert "stripe" not in kinds[first_line:] and "bar" not in kinds[:last_line]
    assert all(k != "text" for k in kinds[:last_line])
