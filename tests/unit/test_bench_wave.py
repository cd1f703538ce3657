"""bench/bench_wave.py's arithmetic: the figures docs/performance.md prints come from these functions."""

from __future__ import annotations

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bench")]

import bench_wave  # noqa: E402


class Phases:
    """A fleet whose nodes' state files hold these rollout phases (name, start, end)."""

    def __init__(self, phases: dict[str, list[tuple[str, float, float]]]):
        self._phases = phases

    def phases(self, name: str) -> list[dict]:
        return [{"name": n, "start": s, "end": e, "result": "ok"} for n, s, e in self._phases[name]]


WAVE = {
    # preflight runs for every node before the canary: never part of the wave
    "w1": [("preflight", 0, 5), ("drain", 100, 110), ("driver", 112, 150), ("resume", 151, 155)],
    "w2": [("preflight", 0, 5), ("drain", 101, 105), ("driver", 106, 130), ("resume", 140, 160)],
}


def test_the_ideal_is_the_slowest_nodes_own_time_and_the_wave_runs_from_first_start_to_last_end():
    got = bench_wave.efficiency(Phases(WAVE), ["w1", "w2"])
    # w1: 10 + 38 + 4 = 52; w2: 4 + 24 + 20 = 48; the wave: 100 .. 160
    assert (got["slowest_node"], got["ideal_s"], got["wave_s"]) == ("w1", 52, 60)
    assert got["efficiency"] == pytest.approx(52 / 60)
    assert got["slowest_node_phases_s"] == {"drain": 10, "driver": 38, "resume": 4}


def test_the_canary_is_measured_over_the_wave_nodes_phases_only():
    canary = {"c": [("preflight", 0, 5), ("drain", 10, 11), ("driver", 11, 14), ("resume", 14, 15), ("soak", 15, 45)]}
    got = bench_wave.efficiency(Phases(canary), ["c"], only={"drain", "driver", "resume"})
    assert got["ideal_s"] == 5  # the 30 s soak is a wait only the canary does
    assert "soak" not in got["slowest_node_phases_s"]


def test_a_node_without_a_finished_phase_stops_the_bench_naming_it():
    fleet = Phases({**WAVE, "w3": [("preflight", 0, 5), ("drain", 100, None)]})
    with pytest.raises(SystemExit, match="w3"):
        bench_wave.efficiency(fleet, ["w1", "w2", "w3"])
