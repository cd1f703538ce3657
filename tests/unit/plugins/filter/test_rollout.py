"""The wave_plan and max_unavailable_count filters: the plan's rules, Ansible serial semantics, every refusal."""

from __future__ import annotations

import random

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.rollout import FilterModule

FILTERS = FilterModule().filters()
wave_plan = FILTERS["wave_plan"]
max_unavailable_count = FILTERS["max_unavailable_count"]


def fleet(count, racks=4, domains=2):
    hosts = [f"gpu-{i:02d}" for i in range(1, count + 1)]
    hostvars = {h: {"rack": f"r{i % racks}", "nvlink_domain": f"nvl{i % domains}", "power": i % 3} for i, h in enumerate(hosts)}
    return hosts, hostvars


def check_plan(plan, hosts, spread_by=(), per=1, cap=None):
    """The rules every plan keeps: each host placed once, in order; sizes and order agree; no wave over a domain or the cap."""
    placed = plan["canary"] + [h for wave in plan["waves"] for h in wave]
    assert sorted(placed) == sorted(hosts) and len(placed) == len(set(placed))
    assert plan["order"] == placed
    assert plan["sizes"] == [len(plan["canary"])] + [len(w) for w in plan["waves"]]
    assert all(plan["waves"])
    for wave in [plan["canary"], *plan["waves"]]:
        if cap is not None:
            assert len(wave) <= cap
        for name in spread_by:
            values = [plan["domains"][h][name] for h in wave]
            assert max(values.count(v) for v in values) <= per, (name, wave)


# --- serial semantics -------------------------------------------------------------------------------


def test_default_waves_are_serial_percentages_of_the_hosts_after_the_canary():
    hosts, hostvars = fleet(21)
    plan = wave_plan(hosts, hostvars)
    # 20 hosts after the canary: 10% -> 2, 25% -> 5, 100% -> 20 (only 13 left)
    assert plan["sizes"] == [1, 2, 5, 13]
    assert plan["canary"] == ["gpu-01"]
    assert plan["waves"][0] == ["gpu-02", "gpu-03"]
    assert plan["budget"] is None
    check_plan(plan, hosts)


def test_last_wave_size_repeats_until_every_host_is_placed():
    hosts, hostvars = fleet(12)
    plan = wave_plan(hosts, hostvars, waves=[1, 3])
    assert plan["sizes"] == [1, 1, 3, 3, 3, 1]
    check_plan(plan, hosts)


def test_percentages_round_down_but_never_to_zero():
    hosts, hostvars = fleet(6)
    assert wave_plan(hosts, hostvars, waves=["10%"])["sizes"] == [1, 1, 1, 1, 1, 1]
    assert wave_plan(hosts, hostvars, waves=["50%", "100%"])["sizes"] == [1, 2, 3]


def test_one_value_is_a_list_of_one_and_digit_strings_count():
    hosts, hostvars = fleet(5)
    assert wave_plan(hosts, hostvars, waves=2)["sizes"] == [1, 2, 2]
    assert wave_plan(hosts, hostvars, waves="2")["sizes"] == [1, 2, 2]
    assert wave_plan(hosts, hostvars, waves="100%")["sizes"] == [1, 4]


def test_a_single_host_is_all_canary():
    plan = wave_plan(["gpu-01"], {})
    assert plan == {"canary": ["gpu-01"], "waves": [], "sizes": [1], "order": ["gpu-01"], "domains": {"gpu-01": {}}, "budget": None, "notes": [],
                    "gate_of": {"gpu-01": 0}}


def test_the_plan_is_deterministic():
    hosts, hostvars = fleet(40, racks=5)
    args = dict(waves=["10%", "30%"], spread_by=["rack", "nvlink_domain"], max_unavailable="20%")
    assert wave_plan(hosts, hostvars, **args) == wave_plan(list(hosts), dict(hostvars), **args)


# --- the canary ----------------------------------------------------------------------------------------


def test_named_canaries_come_first_and_leave_the_waves():
    hosts, hostvars = fleet(8)
    plan = wave_plan(hosts, hostvars, canary=["gpu-05", "gpu-02"], waves=[3])
    assert plan["canary"] == ["gpu-05", "gpu-02"]
    assert plan["order"][:2] == ["gpu-05", "gpu-02"]
    assert plan["sizes"] == [2, 3, 3]
    check_plan(plan, hosts)


def test_picked_canaries_are_spread_too():
    hosts, hostvars = fleet(8, racks=2)
    plan = wave_plan(hosts, hostvars, canary_count=2, spread_by=["rack"])
    assert plan["canary"] == ["gpu-01", "gpu-02"]  # r0 and r1
    assert {plan["domains"][h]["rack"] for h in plan["canary"]} == {"r0", "r1"}
    check_plan(plan, hosts, ["rack"])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"canary": ["gpu-99"]}, ["canary hosts gpu-99 are not among the hosts planned"]),
        ({"canary": ["gpu-01", "gpu-01"]}, ["canary lists a host twice"]),
        ({"canary": "gpu-01"}, ["canary must be a list"]),
        ({"canary_count": 9}, ["canary_count 9 is larger than the 8 hosts"]),
        ({"canary_count": 0}, ["canary_count must be a whole number from 1"]),
        ({"canary_count": -1}, ["canary_count must be a whole number from 1"]),
        ({"canary_count": True}, ["canary_count must be a whole number"]),
        ({"canary_count": 3, "spread_by": ["rack"], "max_per_domain": 1}, ["only 2 canary hosts fit one wave", "rack"]),
        ({"canary": ["gpu-01", "gpu-03"], "spread_by": ["rack"]}, ["the canary holds 2 hosts of rack r0", "max_per_domain is 1"]),
        ({"canary_count": 3, "max_unavailable": 2}, ["canary_count 3 is larger than the 2 nodes the budget"]),
        ({"canary": ["gpu-01", "gpu-02", "gpu-03"], "max_unavailable": 2}, ["the canary holds 3 hosts but the budget lets only 2"]),
    ],
)
def test_canary_refusals(kwargs, words):
    hosts, hostvars = fleet(8, racks=2)
    with pytest.raises(AnsibleFilterError) as caught:
        wave_plan(hosts, hostvars, **kwargs)
    message = str(caught.value)
    assert message.startswith("gpufleet.lifecycle.wave_plan: ")
    for word in words:
        assert word in message


# --- the budget ------------------------------------------------------------------------------------------


def test_no_wave_holds_more_than_the_budget():
    hosts, hostvars = fleet(50)
    plan = wave_plan(hosts, hostvars, max_unavailable="10%")
    assert plan["budget"] == 5
    assert plan["sizes"] == [1, 4, 5, *[5] * 8]  # 10% of 49 -> 4, 25% -> 12 cut to 5, then 100% cut to 5
    assert any("cut to the budget" in note for note in plan["notes"])
    check_plan(plan, hosts, cap=5)


def test_nodes_already_out_use_up_the_budget():
    hosts, hostvars = fleet(50)
    plan = wave_plan(hosts, hostvars, waves=["100%"], max_unavailable=5, pool_size=100, unavailable=3)
    assert plan["budget"] == 5
    assert set(plan["sizes"][1:-1]) == {2}
    check_plan(plan, hosts, cap=2)
    assert wave_plan(hosts, hostvars, waves=["100%"], max_unavailable=5, unavailable=["a", "b", "c", "d"])["sizes"][1] == 1


def test_a_node_named_twice_among_the_unavailable_is_one_node_out():
    hosts, hostvars = fleet(50)
    twice = wave_plan(hosts, hostvars, waves=["100%"], max_unavailable=5, unavailable=["gpu-05", "gpu-05", "gpu-07"])
    once = wave_plan(hosts, hostvars, waves=["100%"], max_unavailable=5, unavailable=["gpu-05", "gpu-07"])
    assert twice["sizes"] == once["sizes"] and twice["sizes"][1] == 3
    assert any("gpu-05 more than once: counted once" in note for note in twice["notes"]), twice["notes"]


def test_a_budget_used_up_is_refused_with_what_to_do():
    hosts, hostvars = fleet(10)
    with pytest.raises(AnsibleFilterError, match=r"budget of 2 unavailable nodes .* used up by 2 nodes already unavailable.*raise max_unavailable"):
        wave_plan(hosts, hostvars, max_unavailable=2, unavailable=2)


@pytest.mark.parametrize(
    ("spec", "pool", "expected"),
    [(4, 100, 4), ("4", 100, 4), ("10%", 37, 3), ("10%", 5, 1), ("100%", 7, 7), ("1%", 10000, 100), (12, 3, 12)],
)
def test_max_unavailable_count(spec, pool, expected):
    assert max_unavailable_count(spec, pool) == expected


@pytest.mark.parametrize(
    ("spec", "pool", "words"),
    [
        (0, 10, "0 would let no node be taken out"),
        (-2, 10, "count of at least 1"),
        ("0%", 10, "neither a count"),
        ("150%", 10, "more than 100%"),
        ("10%\n", 10, "neither a count"),
        ("10\n", 10, "neither a count"),
        ("10 %", 10, "neither a count"),
        ("2.5%", 10, "neither a count"),
        (2.5, 10, "count of at least 1"),
        (True, 10, "count of at least 1"),
        (None, 10, "count of at least 1"),
        ("10%", 0, "pool_size must be a whole number from 1"),
        ("10%", "ten", "pool_size must be a whole number"),
    ],
)
def test_max_unavailable_count_refusals(spec, pool, words):
    with pytest.raises(AnsibleFilterError) as caught:
        max_unavailable_count(spec, pool)
    assert str(caught.value).startswith("gpufleet.lifecycle.max_unavailable_count: ")
    assert words in str(caught.value)


# --- spreading over domains ------------------------------------------------------------------------------------


def test_one_node_per_rack_per_wave():
    hosts, hostvars = fleet(12, racks=3)
    plan = wave_plan(hosts, hostvars, waves=["100%"], spread_by=["rack"], max_per_domain=1)
    assert plan["sizes"] == [1, 3, 3, 3, 2]
    assert plan["waves"][0] == ["gpu-02", "gpu-03", "gpu-04"]
    assert any("at most 1 per value of rack" in note for note in plan["notes"])
    check_plan(plan, hosts, ["rack"])


def test_max_per_domain_two_and_several_variables():
    hosts, hostvars = fleet(24, racks=4, domains=2)
    plan = wave_plan(hosts, hostvars, waves=[6], spread_by=["rack", "nvlink_domain", "power"], max_per_domain=2)
    check_plan(plan, hosts, ["rack", "nvlink_domain", "power"], per=2)
    assert plan["domains"]["gpu-01"] == {"rack": "r0", "nvlink_domain": "nvl0", "power": 0}


def test_a_host_that_does_not_fit_goes_to_a_later_wave():
    # rack r0 holds the first five hosts: one per wave, the others move on
    hosts = [f"gpu-{i}" for i in range(1, 8)]
    hostvars = {h: {"rack": "r0" if i < 5 else f"r{i}"} for i, h in enumerate(hosts)}
    plan = wave_plan(hosts, hostvars, waves=[3], spread_by=["rack"])
    assert plan["canary"] == ["gpu-1"]
    assert plan["waves"] == [["gpu-2", "gpu-6", "gpu-7"], ["gpu-3"], ["gpu-4"], ["gpu-5"]]
    check_plan(plan, hosts, ["rack"])


def test_numbers_and_strings_of_one_value_are_one_domain():
    hosts = ["a", "b", "c"]
    plan = wave_plan(hosts, {"a": {"rack": 2}, "b": {"rack": 1}, "c": {"rack": "1"}}, waves=[2], spread_by=["rack"])
    assert plan["waves"] == [["b"], ["c"]]


@pytest.mark.parametrize("seed", range(20))
def test_random_fleets_keep_every_rule(seed):
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    count = rng.randint(1, 120)
    hosts = [f"n{rng.randint(0, 10**6)}-{i}" for i in range(count)]
    names = ["rack", "leaf", "power"][: rng.randint(0, 3)]
    hostvars = {h: {name: rng.randint(0, rng.randint(1, 12)) for name in names} for h in hosts}
    per = rng.randint(1, 3)
    budget = rng.choice([None, rng.randint(3, 30), f"{rng.randint(5, 100)}%"])
    waves = rng.choice([["10%", "25%", "100%"], [1], [rng.randint(1, 20), f"{rng.randint(1, 100)}%"]])
    try:
        plan = wave_plan(hosts, hostvars, waves=waves, spread_by=names, max_per_domain=per, max_unavailable=budget)
    except AnsibleFilterError as exc:  # a canary that the budget or spread cannot hold is the only refusal here
        assert "canary" in str(exc)
        return
    cap = None if budget is None else max_unavailable_count(budget, count)
    check_plan(plan, hosts, names, per=per, cap=cap)


# --- refusals of the other arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"waves": []}, "waves must be a non-empty list"),
        ({"waves": [0]}, "waves[0] 0 is not a wave size"),
        ({"waves": ["5%", -1]}, "waves[1] -1 is not a wave size"),
        ({"waves": ["10%\n"]}, "waves[0] '10%\\n' is not a wave size"),
        ({"waves": ["0%"]}, "waves[0] '0%' is not a wave size"),
        ({"waves": ["120%"]}, "waves[0] '120%' is more than 100%"),
        ({"waves": [1.5]}, "waves[0] 1.5 is not a wave size"),
        ({"waves": [True]}, "waves[0] True is not a wave size"),
        ({"waves": {"a": 1}}, "waves must be a non-empty list"),
        ({"spread_by": "rack"}, "spread_by must be a list of host variable names"),
        ({"spread_by": ["rack", "rack"]}, "spread_by names rack twice"),
        ({"spread_by": ["rack-id"]}, "not a host variable name"),
        ({"spread_by": ["row"]}, "host gpu-01 has no value for the spread_by variable row"),
        ({"spread_by": ["rack"], "max_per_domain": 0}, "max_per_domain must be a whole number from 1"),
        ({"unavailable": -1, "max_unavailable": 3}, "unavailable must be a whole number from 0"),
        ({"max_unavailable": "5 nodes"}, "max_unavailable '5 nodes' is neither a count"),
    ],
)
def test_argument_refusals_name_the_argument(kwargs, words):
    hosts, hostvars = fleet(6)
    with pytest.raises(AnsibleFilterError) as caught:
        wave_plan(hosts, hostvars, **kwargs)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("hosts", "words"),
    [("gpu-01", "must be a list of inventory host names"), ([], "no hosts to plan"), (["a", "a"], "host a is listed twice"), (["a", 3], "got 3")],
)
def test_hosts_refusals(hosts, words):
    with pytest.raises(AnsibleFilterError, match=words):
        wave_plan(hosts, {})


@pytest.mark.parametrize("value", [None, ["r1"], {"id": 1}, True])
def test_a_domain_value_must_be_one_string_or_number(value):
    with pytest.raises(AnsibleFilterError, match="host b"):
        wave_plan(["a", "b"], {"a": {"rack": "r1"}, "b": {"rack": value}}, spread_by=["rack"])


def test_spread_by_needs_hostvars():
    with pytest.raises(AnsibleFilterError, match="spread_by needs hostvars"):
        wave_plan(["a"], None, spread_by=["rack"])


class FailingVars(dict):
    """A host's variables whose template fails when read (as Ansible's HostVarsVars does for an undefined variable inside)."""

    def __getitem__(self, name):
        raise RuntimeError("'no_such_var' is undefined")


def test_a_variable_that_cannot_be_templated_names_the_host_and_the_variable():
    with pytest.raises(AnsibleFilterError, match=r"host b: the spread_by variable rack cannot be read: 'no_such_var' is undefined"):
        wave_plan(["a", "b"], {"a": {"rack": "r1"}, "b": FailingVars(rack="{{ no_such_var }}")}, spread_by=["rack"])


@pytest.mark.parametrize(("max_per_domain", "noted"), [(None, False), (1, False), (2, True), ("3", True)])
def test_max_per_domain_without_spread_by_is_noted_only_when_it_is_not_the_default(max_per_domain, noted):
    """The rollout passes max_per_domain 1 (its default) on every plan: only another value without spread_by is worth a note."""
    hosts, hostvars = fleet(4)
    plan = wave_plan(hosts, hostvars, waves=["100%"], max_per_domain=max_per_domain)
    assert ("max_per_domain has no effect without spread_by" in plan["notes"]) is noted, plan["notes"]
