"""gpufleet.lifecycle.slurm_capacity with recorded `scontrol show node -o` outputs (real Slurm 22.05.8 lines).

Invariant 1: never more nodes unavailable than max_unavailable, counting the ones out for others.
The clock is fake: sleeping advances it, so the waits are exact and take no time.
"""

from __future__ import annotations

import re

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import clock as _clock
from ansible_collections.gpufleet.lifecycle.plugins.modules import slurm_capacity

from tests.conftest import OWN

SCONTROL = "/usr/bin/scontrol"
SHOW = [SCONTROL, "show", "node", "-o"]
SLURM = OWN / "slurm"
POOL = [f"gpu-{i:02d}" for i in range(1, 11)]


def line(fixture, name):
    """A real `scontrol show node -o` line of the fixture, renamed to ``name``."""
    text = (SLURM / f"show_node_{fixture}.txt").read_text().strip()
    return re.sub(r"^NodeName=\S+ ", f"NodeName={name} ", text)


def with_state(name, state, reason=None):
    text = re.sub(r" State=\S+", f" State={state}", line("idle", name))
    if reason:
        text += f" Reason={reason} [root@2026-11-30T15:38:31]"
    return text


def listing(states=None, names=POOL):
    """All nodes as `scontrol show node -o` prints them: idle unless ``states`` gives a fixture name or a line."""
    states = states or {}
    lines = []
    for name in names:
        given = states.get(name, "idle")
        lines.append(given if given.startswith("NodeName=") else line(given, name))
    return "\n".join(lines) + "\n"


class FakeClock:
    def __init__(self):
        self.now_s = 1_764_590_000.0
        self.sleeps = []

    def now(self):
        return self.now_s

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now_s += seconds


@pytest.fixture
def slurm(commands, monkeypatch):
    commands.tool("scontrol")
    commands.clock = FakeClock()
    monkeypatch.setattr(_clock, "SYSTEM", commands.clock)
    commands.warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, text: commands.warnings.append(text))
    return commands


def answers(commands, monkeypatch, outputs):
    """Each read of all nodes gets the next output (the last one repeats)."""
    queue = list(outputs)
    original = commands.run_command

    def run_command(module, args, **kwargs):
        _seconds, rest = commands.split_timeout(args)
        if list(rest) == SHOW:
            commands.calls.append({"argv": list(rest), "cmd": list(args), "timeout": _seconds, "environ_update": kwargs.get("environ_update"),
                                   "kwargs": kwargs})
            return 0, (queue.pop(0) if len(queue) > 1 else queue[0]), ""
        return original(module, args, **kwargs)

    monkeypatch.setattr(commands, "run_command", run_command)


def args(**extra):
    base = {"pool": POOL, "max_unavailable": 3, "admit": ["gpu-05", "gpu-06"], "rollout_id": "r-2026"}
    base.update(extra)
    return base


# --- admitted -----------------------------------------------------------------------------------------


def test_a_wave_within_the_budget_is_admitted_after_one_read(slurm, run_module):
    slurm.on(SHOW, stdout=listing())
    result = run_module(slurm_capacity.main, args())
    assert not result.get("failed"), result
    assert [call["argv"] for call in slurm.calls] == [SHOW]
    assert slurm.calls[0]["timeout"] == 60
    assert slurm.calls[0]["environ_update"]["SLURM_TIME_FORMAT"] == "standard"
    assert result["admitted"] is True and result["changed"] is False
    assert (result["budget"], result["pool_size"], result["counted"], result["samples"], result["waited_s"]) == (3, 10, 2, 1, 0.0)
    assert result["unavailable"] == []


def test_percentage_budget_of_the_pool(slurm, run_module):
    slurm.on(SHOW, stdout=listing())
    result = run_module(slurm_capacity.main, args(max_unavailable="20%", admit=["gpu-01", "gpu-02"]))
    assert result["budget"] == 2 and result["admitted"] is True
    refused = run_module(slurm_capacity.main, args(max_unavailable="20%", admit=["gpu-01", "gpu-02", "gpu-03"]))
    assert refused["failed"] is True and refused["admitted"] is False


# --- what counts as unavailable ----------------------------------------------------------------------------

UNAVAILABLE = [
    "down_admin", "down_drain", "down_drain_reboot_issued", "down_not_responding", "down_reboot_complete",
    "idle_drain_multiline_reason", "idle_drain_others", "idle_drain_reboot_requested", "idle_drain_reboot_requested_not_responding",
    "idle_fail", "idle_not_responding", "mixed_drain_ours", "mixed_drain_reboot_requested", "mixed_fail", "mixed_not_responding",
]


@pytest.mark.parametrize("fixture", UNAVAILABLE)
def test_every_real_unavailable_state_counts(slurm, run_module, fixture):
    slurm.on(SHOW, stdout=listing({"gpu-01": fixture}))
    state = re.search(r" State=(\S+)", line(fixture, "x")).group(1)
    result = run_module(slurm_capacity.main, args(max_unavailable=1, admit=["gpu-02"]))
    assert result["failed"] is True, result
    assert [entry["node"] for entry in result["unavailable"]] == ["gpu-01"]
    assert result["unavailable"][0]["state"] == state
    assert result["counted"] == 2
    assert f"gpu-01 {state}" in result["msg"]


@pytest.mark.parametrize(
    "state",
    ["IDLE+MAINTENANCE+RESERVED", "IDLE+POWERED_DOWN", "IDLE+POWERING_UP", "IDLE+POWER_DOWN", "FUTURE", "UNKNOWN", "DOWN+CLOUD", "ALLOCATED+DRAIN"],
)
def test_other_unavailable_states_count(slurm, run_module, state):
    slurm.on(SHOW, stdout=listing({"gpu-01": with_state("gpu-01", state)}))
    result = run_module(slurm_capacity.main, args(max_unavailable=1, admit=[]))
    assert result["admitted"] is True  # 1 of 1: at the budget is within it
    assert result["unavailable"] == [{"node": "gpu-01", "state": state, "reason": None, "ours": False}]


@pytest.mark.parametrize("fixture", ["idle", "mixed"])
def test_real_available_states_do_not_count(slurm, run_module, fixture):
    slurm.on(SHOW, stdout=listing({"gpu-01": fixture}))
    assert run_module(slurm_capacity.main, args())["unavailable"] == []


@pytest.mark.parametrize("state", ["ALLOCATED", "IDLE+RESERVED", "MIXED+COMPLETING", "IDLE+PLANNED"])
def test_busy_or_reserved_nodes_are_available(slurm, run_module, state):
    slurm.on(SHOW, stdout=listing({"gpu-01": with_state("gpu-01", state)}))
    assert run_module(slurm_capacity.main, args())["unavailable"] == []


def test_a_pool_node_unknown_to_slurm_is_unavailable(slurm, run_module):
    slurm.on(SHOW, stdout=listing(names=POOL[1:]))
    result = run_module(slurm_capacity.main, args(max_unavailable=2))
    assert result["failed"] is True
    assert result["unavailable"] == [{"node": "gpu-01", "state": "not known to Slurm", "reason": None, "ours": False}]
    slurm.on(SHOW, stdout="No nodes in the system\n")
    empty = run_module(slurm_capacity.main, args(max_unavailable="100%", admit=[]))
    assert empty["admitted"] is True and len(empty["unavailable"]) == 10


def test_nodes_outside_the_pool_do_not_count(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"other-01": "down_admin"}, names=[*POOL, "other-01"]))
    assert run_module(slurm_capacity.main, args())["unavailable"] == []


# --- refusal: pre-existing unavailable nodes use the budget ---------------------------------------------------


def test_nodes_out_for_others_refuse_the_wave_with_who_and_what_to_do(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"gpu-01": "idle_drain_others", "gpu-02": "down_not_responding"}))
    result = run_module(slurm_capacity.main, args())
    assert result["failed"] is True and result["changed"] is False
    assert result["admitted"] is False and result["counted"] == 4 and result["budget"] == 3
    assert result["unavailable"] == [
        {"node": "gpu-01", "state": "IDLE+DRAIN", "reason": "hw ticket 123", "ours": False},
        {"node": "gpu-02", "state": "DOWN+NOT_RESPONDING", "reason": "Not responding", "ours": False},
    ]
    msg = result["msg"]
    assert "2 of the 10 pool nodes are unavailable and this wave would take out 2 more (gpu-05, gpu-06), 4 in all, over the budget of 3" in msg
    assert "gpu-01 IDLE+DRAIN 'hw ticket 123' (others)" in msg
    assert "gpu-02 DOWN+NOT_RESPONDING 'Not responding' (others)" in msg
    assert "wait_timeout 0: no wait" in msg
    assert "raise gpufleet_max_unavailable" in msg
    assert slurm.clock.sleeps == []


def test_our_own_drains_count_and_are_marked_ours(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"gpu-01": "mixed_drain_ours", "gpu-03": "down_reboot_complete"}))
    result = run_module(slurm_capacity.main, args(max_unavailable=4))
    assert result["admitted"] is True and result["counted"] == 4
    assert [(e["node"], e["ours"]) for e in result["unavailable"]] == [("gpu-01", True), ("gpu-03", False)]  # gpu-03 names rollout r9
    assert result["unavailable"][0]["reason"] == "gpufleet:r-2026: driver upgrade a=b [x]"


def test_a_wave_node_already_out_counts_once(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"gpu-05": "mixed_drain_ours", "gpu-01": "idle_fail"}))
    result = run_module(slurm_capacity.main, args(max_unavailable=3))
    assert result["counted"] == 3 and result["admitted"] is True


@pytest.mark.parametrize(
    ("states", "held"),
    [
        ({"gpu-05": "mixed_drain_ours"}, []),  # our own drain (an interrupted run): the slot is ours
        ({"gpu-05": "down_admin"}, ["gpu-05"]),  # a person's drain / DOWN: out for someone else, not our slot
        ({"gpu-06": "idle_fail", "gpu-05": "down_reboot_complete"}, ["gpu-05", "gpu-06"]),  # another rollout's reason too
        ({"gpu-01": "idle_fail"}, []),  # out, but not one of the admitted nodes
    ],
)
def test_admitted_nodes_out_for_someone_else_are_named(slurm, run_module, states, held):
    """Invariant 1: such a node is counted as out and never drained by the admission, so the rollout skips it rather than
    drain it at its own drain step after it came back (found by the rollout's property tests)."""
    slurm.on(SHOW, stdout=listing(states))
    result = run_module(slurm_capacity.main, args(max_unavailable=4))
    assert result["admitted"] is True and result["held_by_others"] == held, result


def test_nodes_already_out_alone_over_the_budget_refuse_even_an_empty_wave(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"gpu-01": "idle_fail", "gpu-02": "down_admin"}))
    result = run_module(slurm_capacity.main, args(max_unavailable=1, admit=[]))
    assert result["failed"] is True and result["counted"] == 2
    assert "this wave would take out" not in result["msg"]


# --- waiting ----------------------------------------------------------------------------------------------------


def test_waits_polling_and_admits_when_a_node_is_resumed(slurm, run_module, monkeypatch):
    busy = listing({"gpu-01": "idle_drain_others", "gpu-02": "down_admin"})
    freed = listing({"gpu-02": "down_admin"})
    answers(slurm, monkeypatch, [busy, busy, freed])
    result = run_module(slurm_capacity.main, args(wait_timeout=60, poll_interval=10))
    assert not result.get("failed"), result
    assert result["admitted"] is True
    assert result["samples"] == 3 and result["waited_s"] == 20.0
    assert slurm.clock.sleeps == [10, 10]
    assert [e["node"] for e in result["unavailable"]] == ["gpu-02"]


def test_the_wait_is_bounded_then_refused(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"gpu-01": "idle_drain_others", "gpu-02": "down_admin"}))
    result = run_module(slurm_capacity.main, args(wait_timeout=25, poll_interval=10))
    assert result["failed"] is True
    assert slurm.clock.sleeps == [10, 10, 5]
    assert result["samples"] == 4 and result["waited_s"] == 25.0
    assert "after waiting 25 s (4 reads of Slurm)" in result["msg"]


def test_check_mode_reads_once_never_waits_and_does_not_fail(slurm, run_module):
    slurm.on(SHOW, stdout=listing({"gpu-01": "idle_drain_others", "gpu-02": "down_admin"}))
    result = run_module(slurm_capacity.main, args(wait_timeout=600), check_mode=True)
    assert not result.get("failed"), result
    assert result["admitted"] is False and result["changed"] is False and result["samples"] == 1
    assert slurm.clock.sleeps == []
    assert any(w.startswith("check mode: capacity admission refused") for w in slurm.warnings)


# --- Slurm that cannot be read -------------------------------------------------------------------------------------


def test_scontrol_failure_fails_with_what_to_check(slurm, run_module):
    slurm.on(SHOW, rc=1, stderr="slurm_load_node error: Unable to contact slurm controller (connect failure)")
    result = run_module(slurm_capacity.main, args())
    assert result["failed"] is True
    assert "Unable to contact slurm controller" in result["msg"] and "gpufleet_slurm_client" in result["msg"]


@pytest.mark.parametrize(
    ("output", "words"),
    [
        (listing().replace("State=IDLE", "State=idle*"), "is not BASE+FLAG"),
        (listing().split(" ThreadsPerCore", maxsplit=1)[0], "looks cut off"),
        (listing() + line("idle", "gpu-01") + "\n", "printed node gpu-01 twice"),
        (listing().replace("State=IDLE", "State=IDLE+WHATEVER", 1), "unknown state flag"),
    ],
)
def test_output_that_cannot_be_read_is_refused(slurm, run_module, output, words):
    slurm.on(SHOW, stdout=output)
    result = run_module(slurm_capacity.main, args())
    assert result["failed"] is True and words in result["msg"], result["msg"]


# --- options ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"pool": []}, "pool is empty"),
        ({"pool": ["gpu[01-04]"]}, "not one Slurm NodeName"),
        ({"pool": ["gpu-01", "gpu-01"]}, "pool names gpu-01 twice"),
        ({"admit": ["gpu-99"]}, "admit names nodes that are not in the pool: gpu-99"),
        ({"max_unavailable": 0}, "0 would let no node be taken out"),
        ({"max_unavailable": "150%"}, "more than 100%"),
        ({"max_unavailable": "10%\n"}, "neither a count"),
        ({"max_unavailable": -1}, "count of at least 1"),
        ({"wait_timeout": -1}, "wait_timeout must be a whole number of seconds from 0 to 86400"),
        ({"wait_timeout": 86401}, "wait_timeout must be"),
        ({"poll_interval": 0}, "poll_interval must be a whole number of seconds from 1 to 3600"),
        ({"rollout_id": "r 1"}, "rollout_id 'r 1' may hold only"),
        ({"owner_tag": "a:b"}, "owner_tag 'a:b' may hold only"),
    ],
)
def test_bad_options_are_refused_before_any_command(slurm, run_module, extra, words):
    result = run_module(slurm_capacity.main, args(**extra))
    assert result["failed"] is True
    assert words in result["msg"], result["msg"]
    assert slurm.calls == []


# --- the sliding window: domains and job ends ------------------------------------------------------------

RACKS = {name: {"rack": f"r{(int(name[-2:]) - 1) // 2 + 1}"} for name in POOL}  # gpu-01/02 r1, gpu-03/04 r2...

SPREAD = [
    # out now (node: fixture), admit, max_per_domain, admitted, words of the refusal
    ({"gpu-01": "idle_fail"}, ["gpu-02"], 1, False, "gpu-02: rack r1 has 1 node(s) out already (gpu-01)"),
    ({"gpu-01": "idle_fail"}, ["gpu-03"], 1, True, ""),  # another rack goes while r1 is held: no head-of-line wait
    ({"gpu-01": "idle_fail"}, ["gpu-02"], 2, True, ""),
    ({}, ["gpu-03", "gpu-04"], 1, False, "gpu-04: rack r2 has 1 node(s) out already (gpu-03)"),  # one wave, one rack
]


@pytest.mark.parametrize(("out", "admit", "per", "admitted", "words"), SPREAD)
def test_the_domain_rule_bounds_the_nodes_out_of_one_domain(slurm, run_module, out, admit, per, admitted, words):
    slurm.on(SHOW, stdout=listing(out))
    result = run_module(slurm_capacity.main, args(admit=admit, spread_by=["rack"], max_per_domain=per, domains=RACKS))
    assert result["admitted"] is admitted, result
    if not admitted:
        assert result["failed"] is True and words in result["msg"] and "gpufleet_wave_max_per_domain" in result["msg"], result["msg"]


def test_waited_why_says_what_held_the_node(slurm, run_module, monkeypatch):
    busy, freed = listing({"gpu-01": "idle_fail", "gpu-02": "down_admin"}), listing({"gpu-01": "idle_fail"})
    answers(slurm, monkeypatch, [busy, freed])
    result = run_module(slurm_capacity.main, args(max_unavailable=2, admit=["gpu-05"], wait_timeout=60, poll_interval=5))
    assert result["admitted"] is True and result["samples"] == 2
    assert result["waited_why"] == "gpu-05: 2 of the budget of 2 nodes are out of service (gpu-01, gpu-02): no slot is free"


SQUEUE = ["/usr/bin/squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING", "-o", "%e|%N"]


def test_read_jobs_returns_each_busy_nodes_latest_job_end(slurm, run_module):
    slurm.tool("squeue")
    slurm.on(SHOW, stdout=listing())
    slurm.on(SQUEUE, stdout="2026-12-05T19:00:00|gpu-[01-02]\n2026-12-05T21:00:00|gpu-02\nUnknown|gpu-07\n2026-12-05T20:00:00|other-9\n")
    result = run_module(slurm_capacity.main, args(admit=[], read_jobs=True))
    assert result["job_ends"] == {"gpu-01": "2026-12-05T19:00:00", "gpu-02": "2026-12-05T21:00:00", "gpu-07": "Unknown"}
    squeue = next(call for call in slurm.calls if call["argv"][0].endswith("squeue"))
    assert squeue["environ_update"]["SLURM_TIME_FORMAT"] == "standard"


@pytest.mark.parametrize(("text", "names"), [
    ("gpu-[01-03,07]", ["gpu-01", "gpu-02", "gpu-03", "gpu-07"]),
    ("a1,b[8-10]", ["a1", "b8", "b9", "b10"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
])
def test_expand_hostlist(text, names):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.capacity import expand_hostlist
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["gpu-[03-01]", "gpu-[a-b]", "gpu-[01"])
def test_a_hostlist_that_cannot_be_read_is_an_error(text):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.capacity import CapacityError, expand_hostlist
    with pytest.raises(CapacityError, match="squeue printed the node list"):
        expand_hostlist(text)
