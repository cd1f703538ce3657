"""playbooks/upgrade.yml with racks: gpufleet_wave_spread_by [rack] and gpufleet_wave_max_per_domain 1 on 8 simulated
nodes in 3 racks (tests/fixtures/rollout/fleet-racks.yml, 127.0.28.x, slurmctld on 18800; the spec's group vars set
each node's rack). No two nodes of one rack are out of service at once: checked from the nodes' own phase times (their
state files) and from Slurm's sampled states, not from the plan alone.
Run:
    .venv/bin/python -m pytest tests/integration/test_rollout_topology.py -m integration -q
"""

from __future__ import annotations

import itertools

import pytest
from fleet import TESTS, fleet_up, needs_fleet
from rollout_helpers import NEW, OLD, RolloutFleet, by_time, report_json, unavailable, waves_of, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-racks.yml"
RACKS = {"gpu-01": "r1", "gpu-02": "r1", "gpu-03": "r1", "gpu-04": "r2", "gpu-05": "r2", "gpu-06": "r2", "gpu-07": "r3", "gpu-08": "r3"}

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-racks")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


@pytest.fixture(scope="module")
def spread(fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("racks")
    sampler = fleet.sampler(out / "slurm-states.jsonl")
    done = fleet.upgrade(out / "report", gpufleet_max_unavailable=3, gpufleet_waves=[3], gpufleet_wave_spread_by=["rack"],
                         gpufleet_wave_max_per_domain=1, gpufleet_wave_pause_seconds=0)
    return {"run": done, "samples": sampler.stop(), "report": out / "report"}


def out_of_service(fleet, name):
    """(start, end) of the node's time out of service: its drain's start to its resume's end (its own state file)."""
    drain, resume = fleet.phase(name, "drain"), fleet.phase(name, "resume")
    assert drain and resume and resume["end"], (name, fleet.phases(name))
    return drain["start"], resume["end"]


def test_every_node_upgraded(fleet, spread):
    assert spread["run"].returncode == 0, spread["run"].stdout[-6000:]
    for name in RACKS:
        assert fleet.driver(name) == NEW, name


def test_the_plan_spreads_each_wave_over_racks(spread):
    for wave in waves_of(report_json(spread["report"])).values():
        racks = [RACKS[n] for n in wave]
        assert len(racks) == len(set(racks)), (wave, racks)


def test_no_two_nodes_of_a_rack_were_out_at_once_by_their_own_times(fleet, spread):
    spans = {name: out_of_service(fleet, name) for name in RACKS}
    for a, b in itertools.combinations(RACKS, 2):
        if RACKS[a] != RACKS[b]:
            continue
        (a0, a1), (b0, b1) = spans[a], spans[b]
        assert a1 <= b0 or b1 <= a0, f"{a} {spans[a]} and {b} {spans[b]} (rack {RACKS[a]}) overlap"
    # Nodes of different racks did overlap: the waves ran nodes in parallel.
    assert any(not (spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0])
               for a, b in itertools.combinations(RACKS, 2) if RACKS[a] != RACKS[b])


def test_no_two_nodes_of_a_rack_were_out_at_once_in_slurms_states(spread):
    for t, nodes in by_time(spread["samples"]).items():
        out = [n for n in RACKS if n in nodes and unavailable(nodes[n]["state"])]
        racks = [RACKS[n] for n in out]
        assert len(racks) == len(set(racks)), (t, out)
