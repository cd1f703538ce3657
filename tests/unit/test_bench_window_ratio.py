"""bench/bench_window_ratio.py's arithmetic: the ratio to the sliding-window ideal from a rollout's evidence and Slurm's samples."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bench")]

import bench_window_ratio as bench  # noqa: E402

T = 1_764_590_000.0


def phase(name, start, end, status="ok"):
    return {"name": name, "start": T + start, "end": T + end, "status": status, "detail": None}


def record(node, wave, result, drain, work):
    """A record whose drain runs over ``drain`` and whose own work (driver, then a 1 s resume) over ``work``."""
    phases = [phase("preflight", -10, -9), phase("drain", *drain), phase("driver", work[0], work[1] - 1), phase("resume", work[1] - 1, work[1])]
    return {"node": node, "wave": wave, "result": result, "phases": phases}


# Two slots. a and b idle, out at 0 and back at 22; c's job ends at 50 but its drain was seen ending at 100, its work to 121.
RECORDS = [
    record("canary", 0, "upgraded", (-9, -8), (-8, -4)),  # before the window opens: left out
    record("a", 1, "upgraded", (0, 1), (1, 22)),
    record("b", 1, "rolled_back", (0, 1), (1, 22)),
    record("c", 1, "upgraded", (22, 100), (100, 121)),
    record("d", 1, "failed_drained", (0, 1), (1, 500)),  # no measure of what the next nodes take: left out
    {"node": "e", "wave": 1, "result": "not_started", "phases": [phase("preflight", -10, -9)]},
]


def state(node, t):
    if node in ("a", "b"):
        return "IDLE+DRAIN" if 0 <= t <= 22 else "IDLE"
    if t < 22:
        return "ALLOCATED"
    if t < 50:
        return "ALLOCATED+DRAIN"
    return "IDLE+DRAIN" if t <= 121 else "IDLE"


SAMPLES = [{"t": T + t, "node": n, "state": state(n, t), "reason": ""} for t in range(-4, 131, 2) for n in ("a", "b", "c", "person")]


def test_the_ratio_from_the_evidence_alone():
    """c's drain lasted 78 s: ready at its end (100). Ideal: a and b 0-21, c 100-121; the actual, 0 to 121."""
    got = bench.figures(RECORDS, 2)
    assert (got["nodes"], got["actual_s"], got["ideal_s"], got["ratio"]) == (3, 121.0, 121.0, 1.0)
    assert got["per_node"]["c"] == {"ready_s": 100.0, "service_s": 21.0, "ideal_start_s": 100.0}


def test_the_ratio_from_slurms_samples():
    """Slurm shows c's job over at 50 (ready: the first sample after its last busy one) and c back at 122: 122 s for an ideal of
    71 s (c 50-71)."""
    got = bench.figures(RECORDS, 2, SAMPLES)
    assert got["per_node"]["c"]["ready_s"] == 50.0 and got["per_node"]["a"]["ready_s"] == 0.0
    assert (got["actual_s"], got["ideal_s"], got["ratio"]) == (122.0, 71.0, round(122 / 71, 3))
    assert got["ready_from"] == "slurm samples"


def test_the_canary_counts_when_asked():
    assert bench.figures(RECORDS, 2, include_canary=True)["nodes"] == 4


@pytest.mark.parametrize(("state", "busy", "out"), [
    ("ALLOCATED", True, False), ("MIXED", True, False), ("ALLOCATED+DRAIN", True, True), ("IDLE+DRAIN", False, True),
    ("IDLE", False, False), ("IDLE*", False, True), ("DOWN+NOT_RESPONDING", False, True), ("COMPLETING+DRAIN", True, True),
])
def test_slurm_states(state, busy, out):
    assert (bench.busy(state), bench.unavailable(state)) == (busy, out)


def test_nothing_measured_or_a_node_missing_from_the_samples_stops_naming_it():
    with pytest.raises(SystemExit, match="no record has a measured service time"):
        bench.figures(RECORDS[-2:], 2)
    with pytest.raises(SystemExit, match="the samples show nothing of c"):
        bench.figures(RECORDS, 2, [s for s in SAMPLES if s["node"] != "c"])


def test_the_evidence_folder_is_read_as_the_report_writes_it(tmp_path):
    (tmp_path / "nodes").mkdir()
    for r in RECORDS:
        (tmp_path / "nodes" / f"{r['node']}.json").write_text(json.dumps(r))
    (tmp_path / "rollout-report.json").write_text(json.dumps({"summary": {"unavailable_budget": 2}, "nodes": []}))
    assert len(bench.read_records(tmp_path)) == len(RECORDS) and bench.report_slots(tmp_path) == 2
    with pytest.raises(SystemExit, match="holds neither"):
        bench.read_records(tmp_path / "nowhere")
