"""The rollout report's timeline as a person sees it: rendered by headless chromium, checked on the screenshot.

A report of a 24-node rollout (canary, three waves) with one node rolled back (gpu-07) is written by the
module's own renderer, then
- chromium takes a 1400x1000 screenshot; the PNG is decoded (tests/browser/png.py) and the chart is found
  by its wave header bands; in every node's row the bars of its phase colours are seen, the red failure
  marks are seen in gpu-07's row and in no other, and the chart is not blank;
- chromium loads a copy of the page with a measuring script (the report itself has none) and dumps the DOM:
  no text of the chart lies outside its SVG or over another text, the chart box needs no horizontal scroll
  and the page no horizontal scroll bar; with 1,000 nodes the box scrolls down, never sideways, and no
  text overlaps.
``test_the_checks_see_a_broken_chart`` breaks the chart (every bar at width 0) and asserts that the bar check fails.

Needs Debian's chromium (tests/browser/install.sh); skips saying so where it is absent. Run:
    .venv/bin/python -m pytest tests/integration/test_report_render.py -m integration -q
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report import rollout, timeline
from ansible_collections.gpufleet.lifecycle.tests.browser.png import Image, hex_rgb, near
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import sample_rollout

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RID = "r-1a2b3c4d5e"
ROLLED = "gpu-07"
HEADER = hex_rgb("#eef1f6")
RED = hex_rgb(timeline.FAILURE_RED)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: run tests/browser/install.sh (as root) to render the report"),
]

MEASURE = """<script>
(function () {
  function inside(b, r) { return b.left >= r.left - 0.5 && b.right <= r.right + 0.5 && b.top >= r.top - 0.5 && b.bottom <= r.bottom + 0.5; }
  function overlap(a, b) { return Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1; }
  var clipped = [], overlaps = [], texts = 0;
  document.querySelectorAll('svg.timeline, svg.axis').forEach(function (svg) {
    var r = svg.getBoundingClientRect();
    var boxes = Array.prototype.map.call(svg.querySelectorAll('text'), function (t) {
      texts += 1;
      var b = t.getBoundingClientRect();
      var shown = (t.lastChild && t.lastChild.nodeType === 3) ? t.lastChild.nodeValue : t.textContent;
      if (!inside(b, r) || b.width < 1) { clipped.push(shown); }
      return [b, shown];
    });
    boxes.sort(function (a, b) { return a[0].top - b[0].top; });  // a sweep down the chart: every pair on one line is compared
    for (var i = 0; i < boxes.length; i++) {
      for (var j = i + 1; j < boxes.length && boxes[j][0].top < boxes[i][0].bottom; j++) {
        if (overlap(boxes[i][0], boxes[j][0])) { overlaps.push(boxes[i][1] + ' / ' + boxes[j][1]); }
      }
    }
  });
  var box = document.querySelector('.timeline-box'), chart = document.querySelector('svg.timeline');
  var out = {texts: texts, clipped: clipped, overlaps: overlaps, boxScroll: box.scrollWidth - box.clientWidth,
             boxTall: box.scrollHeight - box.clientHeight,
             pageScroll: document.documentElement.scrollWidth - window.innerWidth,
             chartWidth: chart.getBoundingClientRect().width, boxWidth: box.clientWidth};
  var pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();
</script>"""


def sample_report():
    records, plan = sample_rollout(24, rollback=(ROLLED,), rollout_id=RID)
    extra = {"who": "alice@ctl-01", "failure_budget": 2, "max_unavailable": "10%", "stop_file": "/var/tmp/gpufleet.stop", "stop_file_present": False}
    return rollout.build_report(records, RID, plan=plan, summary_extra=extra)


def chromium(tmp_path, page, *mode):
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--force-device-scale-factor=1", "--hide-scrollbars",
           f"--user-data-dir={profile}", "--window-size=1400,1000", *mode, page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(tmp_path, html_text, name="report"):
    page = tmp_path / f"{name}.html"
    page.write_text(html_text, encoding="utf-8")
    shot = tmp_path / f"{name}.png"
    chromium(tmp_path, page, f"--screenshot={shot}")
    return Image.read(shot)


def find_chart(image):
    """``(left, [top of each wave header band])``: header bands are rows of the header colour across the chart's width."""
    bands, left = [], None
    for y in range(image.height):
        # A band crosses the whole chart: look at the row only where three spread pixels of it have the colour.
        if sum(near(image.pixel(x, y), HEADER, 2) for x in (image.width // 4, image.width // 2, image.width * 3 // 4)) < 2:
            continue
        line = image.line(y)
        hits = [x for x, p in enumerate(line) if near(p, HEADER, 2)]
        if len(hits) > timeline.PLOT_W * 0.8:
            if not bands or y - bands[-1][-1] > 1:
                bands.append([y])
            else:
                bands[-1].append(y)
            left = hits[0] if left is None else min(left, hits[0])
    return left, [band[0] for band in bands]


def rows_of(report, image):
    """``{node: (top, left of the plot)}`` from the header bands and the chart's fixed row geometry."""
    left, tops = find_chart(image)
    assert left is not None, "no wave header band found: the chart is not on the screen"
    assert len(tops) == len(report["waves"]), f"{len(tops)} header bands seen, {len(report['waves'])} waves"
    rows = {}
    for top, wave in zip(tops, report["waves"]):
        for i, node in enumerate(wave["nodes"]):
            rows[node] = top + timeline.GROUP_H + i * timeline.ROW_H
    return left, rows


def bar_colours(image, left, top):
    """Colours seen on the middle line of a row's bars, with their pixel counts."""
    seen = {}
    y = top + timeline.ROW_H // 2
    for pixel in image.line(y, left + timeline.LABEL_W, left + timeline.LABEL_W + timeline.PLOT_W + 2):
        for name, colour in timeline.PHASE_COLOURS.items():
            if near(pixel, hex_rgb(colour)):
                seen[name] = seen.get(name, 0) + 1
    return seen


def red_pixels(image, left, top):
    count = 0
    for y in range(top, top + timeline.ROW_H):
        count += sum(1 for p in image.line(y, left + timeline.LABEL_W, left + timeline.WIDTH) if near(p, RED, 40))
    return count


def missing_bars(report, image):
    """Per node, the phases at least 4 px wide whose colour is not seen in the node's row."""
    left, rows = rows_of(report, image)
    scale = timeline.PLOT_W / (report["summary"]["ended_epoch"] - report["summary"]["started_epoch"])
    missing = {}
    for node in report["nodes"]:
        seen = bar_colours(image, left, rows[node["node"]])
        wide = {p["name"] for p in node["phases"] if (p["end"] - p["start"]) * scale >= 4}
        if wide - set(seen):
            missing[node["node"]] = sorted(wide - set(seen))
    return missing


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("render")
    report = sample_report()
    return report, screenshot(tmp_path, rollout.render_html(report)), tmp_path


def test_every_row_shows_the_bars_of_its_phases(rendered):
    report, image, _tmp = rendered
    assert missing_bars(report, image) == {}


def test_the_rolled_back_node_is_marked_red_and_no_other(rendered):
    report, image, _tmp = rendered
    left, rows = rows_of(report, image)
    reds = {node: red_pixels(image, left, top) for node, top in rows.items()}
    assert reds[ROLLED] >= 40, f"the failure marks of {ROLLED} are not seen ({reds[ROLLED]} red pixels)"
    assert {node: n for node, n in reds.items() if n and node != ROLLED} == {}


def test_the_chart_is_not_blank(rendered):
    report, image, _tmp = rendered
    left, rows = rows_of(report, image)
    total = {}
    for top in rows.values():
        for name, count in bar_colours(image, left, top).items():
            total[name] = total.get(name, 0) + count
    assert len(total) >= 9, sorted(total)  # admission and resume may be a pixel or two: blended, not counted
    assert sum(total.values()) > 24 * 100
    # The whole chart is on the screen: the last row lies above the window's bottom, the chart's right edge inside it.
    assert max(rows.values()) + timeline.ROW_H < image.height
    assert left + timeline.WIDTH <= image.width


def measure(tmp_path, report):
    """What the laid-out page says about the chart (the MEASURE script's output)."""
    page = tmp_path / f"measure-{len(report['nodes'])}.html"
    page.write_text(rollout.render_html(report).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom", "--virtual-time-budget=5000")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.DOTALL)
    assert found, "the measuring script did not run: " + dom[-500:]
    return json.loads(html.unescape(found.group(1)))


def test_no_text_is_clipped_or_overlapping(rendered):
    report, _image, tmp_path = rendered
    measured = measure(tmp_path, report)
    assert measured["texts"] > 24 + 4 + 5  # row labels, wave headers and boundaries, ticks
    assert (measured["clipped"], measured["overlaps"]) == ([], [])
    assert measured["boxScroll"] <= 0 and measured["pageScroll"] <= 0
    assert measured["chartWidth"] == timeline.WIDTH
    assert measured["boxTall"] <= 0  # 24 nodes need no scrolling


def test_a_thousand_nodes_scroll_down_never_sideways_and_never_overlap(tmp_path):
    records, plan = sample_rollout(1000, rollback=("gpu-0007", "gpu-0500"), skipped=("gpu-0300",), rollout_id=RID)
    measured = measure(tmp_path, rollout.build_report(records, RID, plan=plan))
    assert measured["texts"] > 1000
    assert (measured["clipped"], measured["overlaps"]) == ([], [])
    assert measured["boxScroll"] <= 0 and measured["pageScroll"] <= 0
    assert measured["boxTall"] > 10000  # the box scrolls: rows keep their height


def test_the_checks_see_a_broken_chart(rendered, tmp_path):
    """The bar check can fail: with every bar at width 0 it reports every node."""
    report, _image, _tmp = rendered
    broken = re.sub(r'(<rect class="phase [a-z_]+" x="[\d.]+" y="[\d.]+") width="[\d.]+"', r'\1 width="0"', rollout.render_html(report))
    assert broken != rollout.render_html(report)
    image = screenshot(tmp_path, broken, "broken")
    assert set(missing_bars(report, image)) == {n["node"] for n in report["nodes"]}
