"""NVL72 compute trays without units of change (units.trays_without_units and the nvl72_units_problem filter).

A tray is a node whose GPUs report a non-zero ClusterUUID; every tray of one NVLink domain must be in one unit of
change, or the rollout is refused before any node is touched. Each case is one row.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.rollout_trays import nvl72_unit_by, nvl72_units_problem
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import units

A, B = "2b6e1d4a-0001-4c3e-9a53-000000000a0a", "2b6e1d4a-0001-4c3e-9a53-000000000b0b"
ZERO = "00000000-0000-0000-0000-000000000000"


def tray(uuid, unit=None, domain=None):
    return {"multi_node": True, "cluster_uuid": uuid, "nvlink_domain": domain, "unit": unit}


HGX = {"multi_node": False, "cluster_uuid": ZERO, "nvlink_domain": None, "unit": None}
NO_FABRIC = {"multi_node": None, "cluster_uuid": None, "nvlink_domain": None, "unit": None}

CASES = [
    # nodes, unit_by, words in the refusal ('' : accepted)
    ({"hgx-01": HGX, "hgx-02": HGX, "l40s": NO_FABRIC}, None, ""),
    ({"hgx-01": HGX}, "rack", ""),
    ({}, None, ""),
    # trays without unit_by: refused, naming the trays, their domain and what to set
    ({"nvl-a01": tray(A, domain="rack-a"), "nvl-a02": tray(A, domain="rack-a"), "hgx-01": HGX}, None,
     f"2 targets are GB200/GB300 NVL72 compute trays (NVLink domain {A} (nvlink_domain rack-a): nvl-a01, nvl-a02) but gpufleet_unit_by is not set"),
    ({"nvl-a01": tray(A)}, "", "Set gpufleet_unit_by: nvlink_domain"),
    ({"nvl-a01": tray(A)}, None, "IMEX domain that cannot come UP"),
    # unit_by holding each domain whole: accepted (nvlink_domain, or a rack variable with the same grouping)
    ({"nvl-a01": tray(A, "rack-a"), "nvl-a02": tray(A, "rack-a"), "nvl-b01": tray(B, "rack-b")}, "nvlink_domain", ""),
    ({"nvl-a01": tray(A, "r1"), "nvl-b01": tray(B, "r1")}, "rack", ""),  # two domains in one unit: bigger, never mixed
    ({"nvl-a01": tray(A, "rack-a"), "hgx-01": HGX}, "nvlink_domain", ""),
    # unit_by splitting a domain: refused, naming each tray's unit
    ({"nvl-a01": tray(A, "r1"), "nvl-a02": tray(A, "r2")}, "rack",
     f"gpufleet_unit_by rack splits the trays of an NVLink domain between units of change: NVLink domain {A} (nvl-a01 rack r1, nvl-a02 rack r2)"),
    ({"nvl-a01": tray(A, "rack-a"), "nvl-a02": tray(A, None)}, "nvlink_domain", "nvl-a02 nvlink_domain (unset)"),
]


@pytest.mark.parametrize(("nodes", "unit_by", "words"), CASES)
def test_trays_without_units(nodes, unit_by, words):
    problem = units.trays_without_units(nodes, unit_by)
    if words:
        assert words in problem, problem
        assert "a driver cannot be mixed within an NVLink domain" in problem
    else:
        assert problem == ""


def test_trays_without_units_refuses_unusable_arguments():
    with pytest.raises(units.UnitError, match="must be one host variable name"):
        units.trays_without_units({"nvl-a01": tray(A)}, "rack x")
    with pytest.raises(units.UnitError, match="needs"):
        units.trays_without_units(["nvl-a01"], "rack")


def registered(uuid, multi_node=True):
    return {"ansible_facts": {"gpufleet": {"nvlink": {"cluster_uuid": uuid, "multi_node": multi_node}}}}


HOSTVARS = {
    "nvl-a01": {"__rollout_facts_before": registered(A), "nvlink_domain": "rack-a"},
    "nvl-a02": {"__rollout_facts_before": registered(A), "nvlink_domain": "rack-a"},
    "hgx-01": {"__rollout_facts_before": registered(ZERO, False)},
    "skipped": {"__rollout_facts_before": {"skipped": True}},
}


@pytest.mark.parametrize(("hosts", "unit_by", "words"), [
    (["hgx-01", "skipped"], None, ""),
    (["nvl-a01", "nvl-a02", "hgx-01"], None, "NVLink domain " + A + " (nvlink_domain rack-a): nvl-a01, nvl-a02"),
    (["nvl-a01", "nvl-a02", "hgx-01"], "nvlink_domain", ""),
    (["nvl-a01", "nvl-a02"], "rack", "nvl-a01 rack (unset), nvl-a02 rack (unset)"),
])
def test_the_filter_reads_each_hosts_facts_and_variables(hosts, unit_by, words):
    problem = nvl72_units_problem(hosts, HOSTVARS, unit_by)
    assert (words in problem and problem) if words else problem == "", problem


def test_the_filter_names_itself_on_bad_input():
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.nvl72_units_problem: unit_by must be one host variable name"):
        nvl72_units_problem(["nvl-a01"], HOSTVARS, "not a name")


DEFAULTS = [
    # nodes, unit_by given, the unit_by the rollout uses
    ({"nvl-a01": tray(A, domain="rack-a"), "nvl-a02": tray(A, domain="rack-a"), "nvl-b01": tray(B, domain="rack-b")}, None, "nvlink_domain"),
    ({"nvl-a01": tray(A, domain="rack-a")}, "", "nvlink_domain"),
    ({"nvl-a01": tray(A, domain=7)}, None, "nvlink_domain"),  # a number names a domain too
    # what the user set is kept, whatever the trays
    ({"nvl-a01": tray(A, domain="rack-a")}, "rack", "rack"),
    ({"hgx-01": HGX}, "rack", "rack"),
    # no tray: no units
    ({"hgx-01": dict(HGX, nvlink_domain="x"), "l40s": NO_FABRIC}, None, ""),
    ({}, None, ""),
    # no default when the inventory cannot name each domain: a tray or another target without nvlink_domain, or one
    # ClusterUUID whose trays carry two values (trays_without_units refuses, naming what to set)
    ({"nvl-a01": tray(A, domain="rack-a"), "nvl-a02": tray(A)}, None, ""),
    ({"nvl-a01": tray(A, domain="rack-a"), "hgx-01": HGX}, None, ""),
    ({"nvl-a01": tray(A, domain="rack-a"), "nvl-a02": tray(A, domain="rack-b")}, None, ""),
    ({"nvl-a01": tray(A, domain=True)}, None, ""),
]


@pytest.mark.parametrize(("nodes", "unit_by", "chosen"), DEFAULTS)
def test_default_unit_by(nodes, unit_by, chosen):
    got = units.default_unit_by(nodes, unit_by)
    assert got["unit_by"] == chosen
    defaulted = chosen == "nvlink_domain" and not unit_by
    assert ("gpufleet_unit_by unset" in got["note"]) is defaulted, got
    if defaulted:  # what the default chose holds each domain whole
        assert units.trays_without_units({h: dict(n, unit=n["nvlink_domain"]) for h, n in nodes.items()}, chosen) == ""
    elif not unit_by and any(n.get("multi_node") for n in nodes.values()):  # no default over trays: the refusal says what to set
        assert "Set gpufleet_unit_by: nvlink_domain" in units.trays_without_units(nodes, "")


def test_the_default_filter_reads_each_hosts_facts_and_inventory():
    assert nvl72_unit_by(["nvl-a01", "nvl-a02"], HOSTVARS, None)["unit_by"] == "nvlink_domain"
    assert nvl72_unit_by(["nvl-a01", "nvl-a02", "hgx-01"], HOSTVARS, None)["unit_by"] == ""  # hgx-01 has no nvlink_domain
    assert nvl72_unit_by(["hgx-01", "skipped"], HOSTVARS, "")["unit_by"] == ""
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.nvl72_unit_by: unit_by must be one host variable name"):
        nvl72_unit_by(["nvl-a01"], HOSTVARS, "not a name")
