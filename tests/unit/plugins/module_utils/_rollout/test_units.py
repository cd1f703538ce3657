"""Units of change (plugins/module_utils/_rollout/units.py and wave_plan with unit_by): grouping, refusal, gates, verdict.

Invariant 12 of the design: no unit of change is in service with mixed driver versions. Each case is one row.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter import rollout_units as filters
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import units
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan import PlanError, plan_waves

RACKS = {"a1": "r1", "a2": "r1", "b1": "r2", "a3": "r1", "b2": "r2", "c1": "r3", "c2": "r3", "d1": "r4"}
HOSTVARS = {host: {"rack": rack, "power": "p1" if host in ("a1", "b1") else "p" + host} for host, rack in RACKS.items()}
HOSTS = list(RACKS)


def test_group_units_keeps_the_order_of_each_units_first_host():
    assert units.group_units(HOSTS, HOSTVARS, "rack") == {
        "rack r1": ["a1", "a2", "a3"], "rack r2": ["b1", "b2"], "rack r3": ["c1", "c2"], "rack r4": ["d1"]}


@pytest.mark.parametrize(("hostvars", "unit_by", "words"), [
    ({"a1": {}}, "rack", "host a1 has no value for the unit_by variable rack"),
    ({"a1": {"rack": ""}}, "rack", "host a1 has no value"),
    ({"a1": {"rack": ["r1"]}}, "rack", "a unit is one string or number"),
    ({"a1": {"rack": True}}, "rack", "a unit is one string or number"),
    ({"a1": {"rack": "r1"}}, "rack x", "must be one host variable name"),
])
def test_group_units_refuses(hostvars, unit_by, words):
    with pytest.raises(units.UnitError, match=words):
        units.group_units(["a1"], hostvars, unit_by)


PLANS = [
    # waves, canary, canary_count, expected canary, expected gates (hosts), expected unit sizes per gate
    (["100%"], None, 1, ["a1", "a2", "a3"], [["b1", "b2", "c1", "c2", "d1"]], [[3], [2, 2, 1]]),
    # a gate takes whole units until it holds its size: 1 node asked, the unit of 2 comes whole
    ([1], None, 1, ["a1", "a2", "a3"], [["b1", "b2"], ["c1", "c2"], ["d1"]], [[3], [2], [2], [1]]),
    ([3, "100%"], None, 1, ["a1", "a2", "a3"], [["b1", "b2", "c1", "c2"], ["d1"]], [[3], [2, 2], [1]]),
    # the canary: the unit of a named canary host, whole
    (["100%"], ["c2"], 1, ["c1", "c2"], [["a1", "a2", "a3", "b1", "b2", "d1"]], [[2], [3, 2, 1]]),
    # canary_count beyond the first unit: units until it is covered
    (["100%"], None, 4, ["a1", "a2", "a3", "b1", "b2"], [["c1", "c2", "d1"]], [[3, 2], [2, 1]]),
]


@pytest.mark.parametrize(("waves", "canary", "count", "first", "gates", "sizes"), PLANS)
def test_plan_puts_whole_units_in_gates(waves, canary, count, first, gates, sizes):
    plan = plan_waves(HOSTS, HOSTVARS, waves=waves, canary=canary, canary_count=count, max_unavailable=5, pool_size=20, gates=True,
                      unit_by="rack")
    assert plan["canary"] == first
    assert plan["waves"] == gates
    assert plan["unit_sizes"] == sizes
    assert plan["order"] == first + [host for gate in gates for host in gate]
    assert plan["unit_of"]["b2"] == "rack r2"
    for gate, hosts in enumerate([first, *gates]):  # no unit split across gates
        assert {plan["unit_of"][host] for host in hosts}.isdisjoint(
            {plan["unit_of"][host] for other, hosts2 in enumerate([first, *gates]) if other != gate for host in hosts2})


REFUSALS = [
    # max_unavailable, pool, unavailable, spread_by, max_per_domain, words
    (2, 20, 0, None, None, r"unit rack r1 holds 3 nodes \(a1, a2, a3\) but at most 2 may be out of service at once \(the budget is 2"),
    (4, 20, 2, None, None, "unit rack r1 holds 3 nodes .* at most 2 .*the budget of 4 less the nodes already out leaves 2"),
    ("10%", 20, 0, None, None, "unit rack r1 holds 3 nodes"),  # 10% of 20 = 2
    (5, 20, 0, ["rack"], 2, "unit rack r1 holds 3 nodes of rack r1 but gpufleet_wave_max_per_domain is 2"),
]


@pytest.mark.parametrize(("budget", "pool", "out", "spread", "per", "words"), REFUSALS)
def test_plan_refuses_a_unit_that_could_never_go_out_whole(budget, pool, out, spread, per, words):
    with pytest.raises(PlanError, match=words):
        plan_waves(HOSTS, HOSTVARS, waves=["100%"], max_unavailable=budget, pool_size=pool, unavailable=out, spread_by=spread,
                   max_per_domain=per, gates=True, unit_by="rack")


def test_spread_by_keeps_its_meaning_beside_units():
    """A spread variable across units is the admission's business (at most N per value out); within a unit it must fit whole."""
    plan = plan_waves(HOSTS, HOSTVARS, waves=["100%"], max_unavailable=5, pool_size=20, spread_by=["power"], max_per_domain=1, gates=True,
                      unit_by="rack")
    assert plan["domains"]["a1"] == {"power": "p1"}
    hostvars = dict(HOSTVARS, a2={"rack": "r1", "power": "p1"})
    with pytest.raises(PlanError, match="unit rack r1 holds 2 nodes of power p1 but gpufleet_wave_max_per_domain is 1"):
        plan_waves(HOSTS, hostvars, waves=["100%"], max_unavailable=5, pool_size=20, spread_by=["power"], max_per_domain=1, gates=True,
                   unit_by="rack")


def test_without_unit_by_the_plan_is_unchanged():
    plan = plan_waves(HOSTS, HOSTVARS, waves=["100%"], max_unavailable=2, pool_size=20, gates=True)
    assert plan["canary"] == ["a1"] and "units" not in plan
    assert plan == plan_waves(HOSTS, HOSTVARS, waves=["100%"], max_unavailable=2, pool_size=20, gates=True, unit_by="")


def test_unit_by_needs_the_gates():
    with pytest.raises(PlanError, match="unit_by needs gates=true"):
        plan_waves(HOSTS, HOSTVARS, waves=["100%"], max_unavailable=5, unit_by="rack")


R, B, N, L = units.RESUME, units.ROLLBACK, units.NOTHING, units.LEAVE

VERDICTS = [
    # results, settled, failed, culprits, actions
    ({"a": "upgraded", "b": "upgraded"}, [], False, [], {"a": R, "b": R}),
    ({"a": "upgraded", "b": "unchanged"}, [], False, [], {"a": R, "b": N}),  # at the BOM already: one version in the unit
    ({"a": "upgraded", "b": "rolled_back", "c": "upgraded"}, [], True, ["b"], {"a": B, "b": R, "c": B}),
    ({"a": "upgraded", "b": "failed_drained"}, [], True, ["b"], {"a": B, "b": L}),
    ({"a": "rolled_back", "b": "rolled_back"}, [], True, ["a", "b"], {"a": R, "b": R}),
    # a member left on the old driver beside changed ones would mix the unit: skipped (someone else's drain) or lost
    ({"a": "upgraded", "b": "skipped"}, [], True, ["b"], {"a": B, "b": N}),
    ({"a": "upgraded", "b": "not_started"}, [], True, ["b"], {"a": B, "b": N}),
    # nothing changed: a skipped member alone fails no unit
    ({"a": "unchanged", "b": "skipped"}, [], False, [], {"a": N, "b": N}),
    # a member an earlier run finished is left as it is, and its old result judges nothing now
    ({"a": "upgraded", "b": "rolled_back"}, ["b"], False, [], {"a": R, "b": N}),
]


@pytest.mark.parametrize(("results", "settled", "failed", "culprits", "actions"), VERDICTS)
def test_unit_verdict(results, settled, failed, culprits, actions):
    verdict = units.unit_verdict(results, "rack r1", settled)
    assert verdict["failed"] is failed
    assert verdict["culprits"] == culprits
    assert verdict["actions"] == actions
    assert filters.unit_verdict(results, "rack r1", settled) == verdict
    if failed:
        assert verdict["why"].startswith("unit rack r1 failed: ") and all(host in verdict["why"] for host in culprits)
    else:
        assert verdict["why"] == ""


def test_no_member_is_resumed_on_another_version_than_the_others():
    """Invariant 12 over every mix of results: the members resumed are all upgraded or all restored, never both."""
    import itertools

    kinds = ["upgraded", "unchanged", "rolled_back", "failed_drained", "skipped", "not_started"]
    for combo in itertools.product(kinds, repeat=3):
        results = dict(zip("abc", combo))
        actions = units.unit_verdict(results)["actions"]
        resumed = {results[host] for host, action in actions.items() if action == R}
        assert not ({"upgraded"} & resumed and {"rolled_back"} & resumed), results


DOMAIN_VERDICTS = [
    # results, domain (the unit-wide IMEX domain check), culprits, actions
    # every member upgraded and verified alone, but the domain did not come UP: every changed member is rolled back
    ({"a": "upgraded", "b": "upgraded"}, {"b": "IMEX nodes not READY: 10.0.0.1 (DOWN)"}, ["b"], {"a": B, "b": B}),
    ({"a": "upgraded", "b": "upgraded"}, {"a": "x", "b": "y"}, ["a", "b"], {"a": B, "b": B}),
    # a member at the BOM already stays as it is (nothing to restore), the changed one is rolled back
    ({"a": "upgraded", "b": "unchanged"}, {"b": "the IMEX domain is DOWN"}, ["b"], {"a": B, "b": N}),
    # a member that failed is named once, with both reasons in play
    ({"a": "upgraded", "b": "rolled_back"}, {"b": "z"}, ["b"], {"a": B, "b": R}),
]


@pytest.mark.parametrize(("results", "domain", "culprits", "actions"), DOMAIN_VERDICTS)
def test_a_failed_domain_check_rolls_the_whole_unit_back(results, domain, culprits, actions):
    verdict = units.unit_verdict(results, "rack r1", (), domain)
    assert (verdict["failed"], verdict["culprits"], verdict["actions"]) == (True, culprits, actions)
    assert filters.unit_verdict(results, "rack r1", [], domain) == verdict
    for host in set(domain) - {h for h, r in results.items() if r == "rolled_back"}:
        assert f"{host} {results[host]} but its IMEX domain check failed ({domain[host]})" in verdict["why"]


def test_the_domain_check_of_a_settled_member_judges_nothing():
    assert units.unit_verdict({"a": "upgraded", "b": "upgraded"}, "rack r1", ["b"], {"b": "old"})["failed"] is False


@pytest.mark.parametrize(("domain", "match"), [(["b"], "must be {member: why}, got list"), ({"z": "x"}, "names z, not members of rack r1")])
def test_unit_verdict_refuses_a_domain_that_is_not_the_units(domain, match):
    with pytest.raises(units.UnitError, match=match):
        units.unit_verdict({"a": "upgraded", "b": "upgraded"}, "rack r1", (), domain)


def test_unit_verdict_filter_refuses_no_members():
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.unit_verdict: unit_verdict needs the unit.s members"):
        filters.unit_verdict({})


def test_a_unit_with_a_member_skipped_at_preflight_is_held_back_whole():
    hosts = [host for host in HOSTS if host != "b2"]  # b2 was skipped at preflight (someone else's drain)
    plan = plan_waves(hosts, HOSTVARS, waves=["100%"], max_unavailable=5, pool_size=20, gates=True, unit_by="rack", unit_skipped=["b2"])
    assert "b1" not in plan["order"] and "rack r2" not in [unit["name"] for unit in plan["units"]]
    assert plan["held_back"] == {"b1": plan["notes"][0]}
    assert plan["notes"][0].startswith("unit rack r2 is held back whole: b2 skipped at preflight, so b1 are not changed")
    assert plan["waves"] == [["c1", "c2", "d1"]]
