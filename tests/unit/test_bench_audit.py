"""bench/bench_audit.py's CPU split (--controller-cpus): which CPUs the controller and the simulated fleet get."""

from __future__ import annotations

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bench")]

import bench_audit  # noqa: E402


@pytest.mark.parametrize(("text", "cpus"), [("0", {0}), ("0-1", {0, 1}), ("0-1,4", {0, 1, 4}), (" 2 , 3-3", {2, 3})])
def test_cpu_lists_read_as_taskset_writes_them(text, cpus):
    assert bench_audit.parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "0;1"])
def test_a_list_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match=r"CPU list|empty range"):
        bench_audit.parse_cpus(text)


def test_the_fleet_gets_every_cpu_the_controller_does_not():
    controller, fleet = bench_audit.cpu_split("0-1", set(range(16)))
    assert controller == ["taskset", "-c", "0,1"]
    assert fleet == ["taskset", "-c", ",".join(map(str, range(2, 16)))]


def test_no_split_runs_both_as_they_are():
    assert bench_audit.cpu_split(None, {0, 1}) == ([], [])


@pytest.mark.parametrize(("text", "message"), [("0-1", "leaves no CPU for the simulated fleet"), ("2", r"CPUs \[2\] are not available")])
def test_a_split_the_machine_cannot_give_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        bench_audit.cpu_split(text, {0, 1})
