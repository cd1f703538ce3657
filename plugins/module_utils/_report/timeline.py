# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's timeline chart: inline SVG, no script, no external asset (private).

One row per node, grouped by wave (canary first); x is wall-clock time from the rollout's start,
one bar per phase coloured by phase; a failed phase has a red outline over hatching, a failed node
a red diamond where its failure was decided (the rollback's start, else the failed phase's end);
each wave's start is a dashed vertical line labelled in that wave's header row. The time axis sits
at the top of a scrolling box (sticky), so 1,000 rows stay readable: rows have a fixed height and
never overlap, the box scrolls.
"""

from __future__ import annotations

import html

# Phase colours: distinct from each other and from FAILURE_RED (the failure marks must stand out).
PHASE_COLOURS = {
    "preflight": "#8c8c8c",
    "admission": "#c7b37a",
    "drain": "#f2a93b",
    "ofed": "#9ecae1",
    "nic_firmware": "#6baed6",
    "gpu_firmware": "#3182bd",
    "driver": "#31a354",
    "activate": "#9467bd",
    "validate": "#17becf",
    "resume": "#bcbd22",
    "soak": "#8c6d31",
    "rollback": "#393b79",
}
FAILURE_RED = "#e00000"
LABEL_W = 180  # the node names' column
PLOT_W = 1000
RIGHT_PAD = 30  # room for a marker at the very end
ROW_H = 16
BAR_H = 10
GROUP_H = 20  # a wave's header row
AXIS_H = 26
NAME_CHARS = 26
WIDTH = LABEL_W + PLOT_W + RIGHT_PAD
SCROLLBAR_W = 20
_STEPS = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_FONT = 'font-family="DejaVu Sans Mono,monospace" font-size="11"'


def tick_step(span, most=12):
    """The smallest readable tick step (seconds) giving at most ``most`` ticks over ``span`` seconds."""
    for step in _STEPS:
        if span / step <= most:
            return step
    return _STEPS[-1] * (int(span / (_STEPS[-1] * most)) + 1)


def _minutes(seconds):
    return f"{round(seconds / 60.0, 1):g} min"


def _short(name):
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _failure_at(node):
    """Time at which the node's failure was decided: the rollback's start, else the failed phase's end, else the node's end."""
    rollback = next((p for p in node["phases"] if p["name"] == "rollback"), None)
    if rollback:
        return rollback["start"]
    failed = next((p for p in node["phases"] if p["status"] == "failed"), None)
    if failed:
        return failed["end"] if failed["end"] is not None else failed["start"]
    return node["end"]


def render_timeline(report):
    """HTML: the legend, then a scrolling box holding the sticky time axis and the chart (both SVG)."""
    esc = html.escape
    summary = report["summary"]
    t0 = summary["started_epoch"]
    nodes = report["nodes"]
    if t0 is None:
        return "<p>No phase was recorded: nothing to draw.</p>"
    span = max(summary["ended_epoch"] - t0, 1.0)
    scale = PLOT_W / span

    def x_of(ts):
        return LABEL_W + (ts - t0) * scale

    step = tick_step(span)
    ticks = [i * step for i in range(int(span // step) + 1)]

    by_wave = {}
    for node in nodes:
        by_wave.setdefault(node["wave"], []).append(node)
    height = sum(GROUP_H + ROW_H * len(by_wave[w["wave"]]) for w in report["waves"]) + 4

    axis = [f'<svg class="axis" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{AXIS_H}" viewBox="0 0 {WIDTH} {AXIS_H}" '
            f'role="img" aria-label="time from the rollout start, in minutes">',
            f'<rect x="0" y="0" width="{WIDTH}" height="{AXIS_H}" fill="#fff"/>',
            f'<text x="4" y="16" {_FONT} fill="#444">node \\ time from start</text>',
            f'<line x1="{LABEL_W}" y1="{AXIS_H - 1}" x2="{LABEL_W + PLOT_W}" y2="{AXIS_H - 1}" stroke="#444"/>']
    for tick in ticks:
        x = x_of(t0 + tick)
        anchor = "end" if x > LABEL_W + PLOT_W - 30 else ("start" if tick == 0 else "middle")
        axis.append(f'<line x1="{x:.1f}" y1="{AXIS_H - 6}" x2="{x:.1f}" y2="{AXIS_H - 1}" stroke="#444"/>')
        axis.append(f'<text x="{x:.1f}" y="14" text-anchor="{anchor}" {_FONT} fill="#222">{_minutes(tick)}</text>')
    axis.append("</svg>")

    chart = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="rollout timeline: one row per node, one bar per phase">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="none"/><line x1="0" y1="0" x2="0" y2="6" stroke="#fff" stroke-width="2.5"/></pattern></defs>',
    ]
    for tick in ticks:
        x = x_of(t0 + tick)
        chart.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height}" stroke="#e4e4e4"/>')
    backgrounds, rows = [], []  # drawn in that order, with the wave lines between: lines over the stripes, under bars and text
    boundaries = []
    y = 0
    index = 0
    for wave in report["waves"]:
        members = by_wave[wave["wave"]]
        group_y = y
        backgrounds.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{GROUP_H}" fill="#eef1f6"/>')
        rows.append(f'<text x="4" y="{y + 14}" {_FONT} font-weight="bold" fill="#222">{esc(wave["label"])} ({len(members)})</text>')
        if wave["start"] is not None:
            bx = x_of(wave["start"])
            boundaries.append((bx, group_y, wave))
        y += GROUP_H
        for node in members:
            if index % 2:
                backgrounds.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW_H}" fill="#f6f6f6"/>')
            rows.append(_row(node, y, x_of, summary["ended_epoch"]))
            y += ROW_H
            index += 1
    chart.extend(backgrounds)
    for bx, group_y, _wave in boundaries:
        chart.append(f'<line class="wave-boundary" x1="{bx:.1f}" y1="{group_y}" x2="{bx:.1f}" y2="{height}" stroke="#333" '
                     'stroke-width="1.2" stroke-dasharray="5,3"/>')
    chart.extend(rows)
    for bx, group_y, wave in boundaries:
        right = bx > LABEL_W + PLOT_W * 0.7
        label = "{} starts, {}".format(wave["label"], _minutes(wave["start"] - t0))
        tx, anchor = (bx - 4, "end") if right else (bx + 4, "start")
        chart.append(f'<text x="{tx:.1f}" y="{group_y + 14}" text-anchor="{anchor}" {_FONT} fill="#333">{esc(label)}</text>')
    chart.append("</svg>")

    legend = ['<div class="legend" style="display:flex;flex-wrap:wrap;gap:.3em 1.2em;margin:.5em 0;font-size:90%">']
    for name, colour in PHASE_COLOURS.items():
        legend.append(f'<span><svg width="22" height="12"><rect width="22" height="12" fill="{colour}"/></svg> {name}</span>')
    legend.append(f'<span><svg width="22" height="12"><rect width="22" height="12" fill="#31a354"/><rect width="22" height="12" fill="url(#hatch)" '
                  f'stroke="{FAILURE_RED}" stroke-width="2"/></svg> failed phase</span>')
    legend.append(f'<span><svg width="14" height="14"><path d="M7 1 L13 7 L7 13 L1 7 Z" fill="{FAILURE_RED}"/></svg> '
                  "failure decided (rollback or left drained)</span>")
    legend.append('<span><svg width="22" height="12"><line x1="11" y1="0" x2="11" y2="12" stroke="#333" stroke-dasharray="3,2"/></svg> '
                  "wave start</span></div>")
    # Room for a vertical scroll bar (long fleets) so that it never forces a horizontal one.
    box = (f'<div class="timeline-box" style="overflow:auto;max-height:75vh;max-width:100%;border:1px solid #ccc;width:{WIDTH + SCROLLBAR_W}px">'
           f'<div style="position:sticky;top:0;z-index:1;line-height:0">{"".join(axis)}</div>'
           f'<div style="line-height:0">{"".join(chart)}</div></div>')
    return "\n".join(legend) + "\n" + box


def _row(node, y, x_of, t_end):
    esc = html.escape
    parts = []
    tip = "{}: {}{}".format(node["node"], node["result"].replace("_", " "), " — " + node["reason"] if node["reason"] else "")
    parts.append(f'<text x="4" y="{y + 12}" {_FONT} fill="#222"><title>{esc(tip)}</title>{esc(_short(node["node"]))}</text>')
    bar_y = y + (ROW_H - BAR_H) / 2
    for phase in node["phases"]:
        end = phase["end"] if phase["end"] is not None else max(t_end, phase["start"])
        x = x_of(phase["start"])
        width = max(x_of(end) - x, 1.5)
        colour = PHASE_COLOURS[phase["name"]]
        seconds = end - phase["start"]
        title = "{} {}: {} {:.0f} s{}".format(node["node"], phase["name"], phase["status"], seconds, " — " + phase["detail"] if phase["detail"] else "")
        opacity = ' fill-opacity="0.35"' if phase["status"] == "skipped" else ""
        dashed = ' stroke="#222" stroke-dasharray="2,2"' if phase["end"] is None else ""
        parts.append(f'<rect class="phase {phase["name"]}" x="{x:.1f}" y="{bar_y:.1f}" width="{width:.1f}" height="{BAR_H}" fill="{colour}"'
                     f'{opacity}{dashed}><title>{esc(title)}</title></rect>')
        if phase["status"] == "failed":
            parts.append(f'<rect class="failed" x="{x:.1f}" y="{bar_y:.1f}" width="{width:.1f}" height="{BAR_H}" fill="url(#hatch)" '
                         f'stroke="{FAILURE_RED}" stroke-width="2"/>')
    if not node["phases"]:
        note = node["result"].replace("_", " ") + (": " + node["reason"] if node["reason"] else "")
        note = note if len(note) <= 140 else note[:139] + "…"
        # On a white backing, so that a wave line does not run through the words (monospace: 0.62 em a character).
        parts.append(f'<rect x="{LABEL_W + 2}" y="{y + 2}" width="{len(note) * 6.9 + 4:.0f}" height="{ROW_H - 4}" fill="#fff"/>')
        parts.append(f'<text x="{LABEL_W + 4}" y="{y + 12}" {_FONT} font-style="italic" fill="#666">{esc(note)}</text>')
    if node["result"] in ("rolled_back", "failed_drained"):
        at = _failure_at(node)
        if at is not None:
            cx, cy = x_of(at), y + ROW_H / 2
            parts.append(f'<path class="failure-marker" d="M{cx:.1f} {cy - 6:.1f} L{cx + 6:.1f} {cy:.1f} L{cx:.1f} {cy + 6:.1f} L{cx - 6:.1f} {cy:.1f} Z" '
                         f'fill="{FAILURE_RED}" stroke="#fff" stroke-width="1"><title>{esc(tip)}</title></path>')
    return "".join(parts)
