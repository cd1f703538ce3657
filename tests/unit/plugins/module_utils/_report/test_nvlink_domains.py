"""Table tests of the audit's NVLink domain checks (issue 23): trays grouped by ClusterUUID."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import build_report, render_markdown
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.nvlink_domains import nvlink_domains

A = "6a1b2c3d-0000-4000-8000-00000000000a"
B = "6a1b2c3d-0000-4000-8000-00000000000b"
ZERO = "00000000-0000-0000-0000-000000000000"


def tray(name, uuid=A, driver="580.95.05", imex="580.95.05", state="UP", inventory=None, nvlink_problems=(), imex_problems=(), installed=True):
    facts = {
        "driver": {"version": driver, "installed": True, "loaded": True},
        "nvlink": {
            "cluster_uuid": uuid,
            "clique_id": 1 if uuid != ZERO else 0,
            "multi_node": None if uuid is None else uuid != ZERO,
            "fabric_ok": not nvlink_problems,
            "problems": list(nvlink_problems),
        },
        "imex": {
            "installed": installed,
            "version": imex if installed else None,
            "matches_driver": imex == driver if installed else None,
            "domain": {"domain_state": state} if installed else None,
            "problems": list(imex_problems),
        },
    }
    record = {"name": name, "sku": "gb200", "bom": {}, "facts": facts}
    if inventory is not None:
        record["nvlink_domain"] = inventory
    return record


def hgx(name, inventory=None):
    record = {
        "name": name,
        "sku": "hgx",
        "bom": {},
        "facts": {
            "driver": {"version": "550.90.07"},
            "nvlink": {"cluster_uuid": ZERO, "multi_node": False, "problems": []},
            "imex": {"installed": False, "problems": []},
        },
    }
    if inventory is not None:
        record["nvlink_domain"] = inventory
    return record


@pytest.mark.parametrize(
    ("records", "domains", "problems"),
    [
        # two healthy domains, the inventory agrees: no problem
        ([tray("a1", inventory="rack-a"), tray("a2", inventory="rack-a"), tray("b1", B, inventory="rack-b")], [(A, "rack-a", 2), (B, "rack-b", 1)], []),
        # a planted mixed-driver domain (IMEX follows its driver)
        (
            [tray("a1"), tray("a2", driver="580.105.08", imex="580.105.08", state="DOWN")],
            [(A, None, 2)],
            ["runs different drivers: 580.105.08 on a2; 580.95.05 on a1", "runs different IMEX versions", "the IMEX domain is not UP: DOWN on a2"],
        ),
        # IMEX one release off its driver on one tray
        (
            [tray("a1"), tray("a2", imex="580.82.07", imex_problems=["nvidia-imex 580.82.07 is not the loaded driver's version 580.95.05"])],
            [(A, None, 2)],
            ["different IMEX versions: 580.82.07 on a2; 580.95.05 on a1", "a2: nvidia-imex 580.82.07 is not"],
        ),
        # a tray whose fabric failed to join: zero UUID, Insufficient Resources; the inventory says rack-a
        (
            [
                tray("a1", inventory="rack-a"),
                tray("a2", ZERO, inventory="rack-a", nvlink_problems=["GPU 0 (x): fabric status is 'Insufficient Resources', not 'Success'"]),
            ],
            [(A, "rack-a", 1)],
            ["a2: GPU 0 (x): fabric status is 'Insufficient Resources'", "a2: the inventory puts it in NVLink domain 'rack-a' but"],
        ),
        # an unhealthy fabric inside a domain
        (
            [tray("a1", nvlink_problems=["GPU 3 (x): fabric health is 'Unhealthy', not 'Healthy'"])],
            [(A, None, 1)],
            ["a1: GPU 3 (x): fabric health is 'Unhealthy'"],
        ),
        # IMEX domain not UP
        ([tray("a1", state="DOWN")], [(A, None, 1)], ["the IMEX domain is not UP: DOWN on a1"]),
        # inventory disagrees with the ClusterUUID: one UUID split over two names, one name over two UUIDs
        (
            [tray("a1", inventory="rack-a"), tray("a2", inventory="rack-b"), tray("b1", B, inventory="rack-a")],
            [(A, None, 2), (B, "rack-a", 1)],
            [
                "the inventory variable nvlink_domain splits it: rack-a on a1; rack-b on a2",
                "the inventory's NVLink domain 'rack-a' holds trays of 2 ClusterUUIDs",
            ],
        ),
        # GPUs of one tray disagree: no domain, the contradiction reported
        (
            [tray("a1", None, nvlink_problems=["the GPUs of this node report different ClusterUUIDs (NVLink domains): ..."])],
            [],
            ["a1: the GPUs of this node report different ClusterUUIDs"],
        ),
        # a tray without IMEX in a domain
        ([tray("a1", installed=False)], [(A, None, 1)], ["a1: no nvidia-imex on a tray of NVLink domain"]),
        # HGX nodes: no domain, and their nvlink_domain variable (a rollout unit there) is not a problem
        ([hgx("h1", inventory="nvl-a"), hgx("h2")], [], []),
        # records that could not be read are skipped
        ([{"name": "x", "error": "gpu_facts failed"}], [], []),
    ],
)
def test_nvlink_domains(records, domains, problems):
    result = nvlink_domains(records)
    assert [(d["cluster_uuid"], d["inventory_domain"], len(d["nodes"])) for d in result["domains"]] == domains
    for problem in problems:
        assert any(problem in line for line in result["problems"]), (problem, result["problems"])
    if not problems:
        assert result["problems"] == []


def test_imex_domain_state_down_is_reported_through_the_tray_problems():
    result = nvlink_domains([tray("a1", state="DOWN", imex_problems=["the IMEX domain state is 'DOWN', not 'UP'"])])
    assert result["domains"][0]["imex_domain_states"] == {"DOWN": ["a1"]}
    assert result["problems"][-1] == "a1: the IMEX domain state is 'DOWN', not 'UP'"


def test_report_carries_domains_only_for_trays():
    hgx_report = build_report([hgx("h1")])
    assert "nvlink_domains" not in hgx_report
    report = build_report([tray("a1", inventory="rack-a"), tray("a2", driver="580.105.08", imex="580.105.08", inventory="rack-a")])
    assert report["nvlink_domains"]["domains"][0]["drivers"] == {"580.105.08": ["a2"], "580.95.05": ["a1"]}
    text = render_markdown(report)
    assert "## NVLink domains" in text and "runs different drivers" in text
