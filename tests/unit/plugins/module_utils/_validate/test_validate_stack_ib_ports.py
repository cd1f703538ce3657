"""gpu_validate's ib_ports check (issue 24): the verdict as a table, on every real ibstat / ibstatus / ibv_devinfo capture,
and a cut-off or garbled ibstat as a failed check that names the tool."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom_stack import normalize
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.stack import StackReader
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import infiniband
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import stack as stack_checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stack import ib_ports_verdict

from tests.conftest import real_files, real_params


def groups(*given):
    return normalize({"rdma_ports": list(given)})["rdma_ports"]


def port(device, state="Active", physical="LinkUp", rate=400, link_layer="InfiniBand", ca_type="MT4129", number=1):
    active = state == "Active" and physical in (None, "LinkUp")
    return {"device": device, "port": number, "state": state, "physical_state": physical, "rate_gbps": rate if state == "Active" else None,
            "link_layer": link_layer, "ca_type": ca_type, "active": active}


def ibstat(*ports, errors=()):
    return {"source": "ibstat", "ports": list(ports), "errors": list(errors)}


IB400 = {"count": 2, "link_layer": "InfiniBand", "rate": 400}
TWO_UP = ibstat(port("mlx5_0"), port("mlx5_1"))

# (rdma read, BOM groups, status, words the message must hold, words it must not hold)
CASES = {
    "all-active-at-rate": (TWO_UP, [IB400], "pass", ["2 port(s) Active/LinkUp"], []),
    # A Down port fails naming its state; ibstat's "Rate: 10" of a Down port is never reported as its rate.
    "down-names-state-not-rate": (
        ibstat(port("mlx5_0"), port("mlx5_1", "Down", "Disabled")), [IB400], "fail", ["mlx5_1/1 is Down/Disabled", "subnet manager"], ["10 Gb/s"],
    ),
    "polling": (ibstat(port("mlx5_0"), port("mlx5_1", "Down", "Polling")), [IB400], "fail", ["mlx5_1/1 is Down/Polling"], []),
    "active-but-not-linkup": (ibstat(port("mlx5_0"), port("mlx5_1", "Active", "LinkErrorRecovery")), [IB400], "fail",
                              ["mlx5_1/1 is Active/LinkErrorRecovery, not Active/LinkUp"], []),
    "half-rate-names-both-rates": (
        ibstat(port("mlx5_0"), port("mlx5_1", rate=200)), [IB400], "fail", ["mlx5_1/1 runs at 200 Gb/s, 400 Gb/s expected", "degraded"], [],
    ),
    "a-port-missing": (ibstat(port("mlx5_0")), [IB400], "fail", ["2 x InfiniBand Active/LinkUp 400 Gb/s expected, ibstat lists 1"], []),
    "a-named-device-missing": (
        ibstat(port("mlx5_0")), [dict(IB400, devices=["mlx5_0", "mlx5_1"])], "fail", ["ibstat lists 1 (no mlx5_1 on this node)"], [],
    ),
    "more-ports-than-the-bom": (ibstat(port("mlx5_0"), port("mlx5_1"), port("mlx5_2")), [IB400], "fail", ["expected, ibstat lists 3"], []),
    "roce-is-not-infiniband": (
        ibstat(port("mlx5_0", link_layer="Ethernet"), port("mlx5_1", link_layer="Ethernet")), [IB400], "fail", ["ibstat lists 0"], [],
    ),
    "ca-type-narrows": (
        ibstat(port("mlx5_0"), port("mlx5_1"), port("mlx5_2", ca_type="MT4125", rate=100, link_layer="Ethernet")),
        [dict(IB400, ca_type="MT4129"), {"count": 1, "link_layer": "Ethernet", "rate": 100, "ca_type": "MT4125"}], "pass", ["3 port(s)"], [],
    ),
    "no-device-registered": (
        ibstat(errors=["ibstat listed no device (exit status 255)"]), [IB400], "fail", ["ibstat lists 0", "mlx5_ib", "ibstat also said"], [],
    ),
    "ibv_devinfo-prints-no-rate": (
        {"source": "ibv_devinfo", "ports": [port("mlx5_0", physical=None, rate=None), port("mlx5_1", physical=None, rate=None)], "errors": []},
        [IB400], "fail", ["ibv_devinfo prints no rate", "install infiniband-diags"], [],
    ),
    "no-tool-installed": ({"source": None, "ports": None, "errors": []}, [IB400], "fail", ["neither ibstat nor ibv_devinfo is installed"], []),
    "unreadable-device-warns": (
        ibstat(port("mlx5_0"), port("mlx5_1"), errors=["stat of IB device 'mlx5_8' failed"]), [IB400], "warn", ["mlx5_8"], [],
    ),
    "unreadable-device-joins-a-failure": (
        ibstat(port("mlx5_0"), errors=["stat of IB device 'mlx5_8' failed"]), [IB400], "fail", ["lists 1", "ibstat also said", "mlx5_8"], [],
    ),
    "bom-names-no-port": (TWO_UP, [], "skip", ["names no InfiniBand / RoCE port"], []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ib_ports_verdict(case):
    rdma, given, status, words, absent = CASES[case]
    verdict = ib_ports_verdict(rdma, groups(*given) if given else [])
    assert verdict[0] == status, verdict
    for word in words:
        assert word in verdict[3], (word, verdict[3])
    for word in absent:
        assert word not in verdict[3], (word, verdict[3])


PARSE = {"ibstat": infiniband.parse_ibstat, "ibstatus": infiniband.parse_ibstatus, "ibv_devinfo": infiniband.parse_ibv_devinfo}


def _bom_of(ports):
    """The BOM a node with exactly these ports, all healthy, would have: one group per link layer, CA type and rate."""
    counts = {}
    for item in ports:
        key = (item["link_layer"], item.get("ca_type"), item["rate_gbps"] or 400)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return groups(IB400)
    return groups(*({"count": n, "link_layer": layer, "rate": rate, **({"ca_type": ca} if ca else {})} for (layer, ca, rate), n in counts.items()))


@pytest.mark.parametrize("path", real_params("stack/ib/*"))
def test_every_real_capture_passes_only_where_every_port_is_active_at_a_known_rate(path):
    """Each capture that a port tool's parser reads, against the BOM of its own ports: a pass exactly where every port is
    Active / LinkUp with a rate read and the tool reported no error; a Down port always fails, named with its state."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for tool, parse in PARSE.items():
        try:
            rdma = {"source": tool, **parse(text)}
        except ParseError:
            continue
        verdict = ib_ports_verdict(rdma, _bom_of(rdma["ports"]))
        healthy = all(p["active"] and p["rate_gbps"] is not None for p in rdma["ports"]) and rdma["ports"]
        if healthy and not rdma["errors"]:
            assert verdict[0] == "pass", (path.name, verdict)
        else:
            assert verdict[0] in ("fail", "warn"), (path.name, verdict)
        for item in rdma["ports"]:
            if not item["active"]:
                assert f"{item['device']}/{item['port']} " in verdict[3] or f"{item['device']}/{item['port']}," in verdict[3], (path.name, verdict)


def test_real_b300_node_names_the_down_cx8_ports_and_the_cx7_ports_at_a_quarter_rate():
    files = real_files("stack/ib/ibstat_B300-node_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    rdma = {"source": "ibstat", **infiniband.parse_ibstat(files[0].read_text())}
    bom = groups(
        {"count": 7, "link_layer": "InfiniBand", "rate": 400, "ca_type": "MT4131"}, {"count": 4, "link_layer": "InfiniBand", "rate": 400, "ca_type": "MT4129"}
    )
    status, observed, _expected, message = ib_ports_verdict(rdma, bom)
    assert status == "fail"
    assert "mlx5_0/1, mlx5_1/1, mlx5_10/1, mlx5_6/1, mlx5_7/1, mlx5_8/1, mlx5_9/1 are Down/Disabled" in message
    assert "mlx5_2/1, mlx5_3/1, mlx5_4/1, mlx5_5/1 run at 100 Gb/s, 400 Gb/s expected" in message
    assert "10 Gb/s" not in message and observed["ports"]["mlx5_0/1"] == "Down/Disabled"


class FakeTool:
    def __init__(self, rc, out, err=""):
        self.available = True
        self.result = (rc, out, err)

    def run(self, args, ok_rcs=(0,), timeout=None):
        return self.result


class Ctx:
    def __init__(self, stack, reader):
        self.options = {"expected_stack": normalize(stack), "command_timeout": 120, "checks": None}
        self.facts = {"kernel": "6.8.0-90-generic", "driver": {"loaded": True, "version": "580.95.05"}}
        self.reader = reader


GOOD = (
    "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n"
    "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
)


@pytest.mark.parametrize(
    ("out", "status", "words"),
    [
        (GOOD, "pass", ["1 port(s) Active/LinkUp"]),
        # Cut before the port block: the CA declares a port it does not show.
        (GOOD[: GOOD.index("\tPort 1:")], "fail", ["ibstat", "cut short", "run ibstat by hand", "skip_checks"]),
        # A port without its link layer (the line cut away) is refused, not read as a pass.
        (GOOD.replace("\t\tLink layer: InfiniBand\n", ""), "fail", ["ibstat", "Link layer", "run ibstat by hand"]),
        ("\x00\xff garbage\n", "fail", ["ibstat", "unexpected output", "run ibstat by hand"]),
    ],
    ids=["whole", "cut-before-the-port", "no-link-layer", "garbage"],
)
def test_check_reads_ibstat_and_never_passes_a_cut_or_garbled_output(monkeypatch, out, status, words):
    def tools(cls, option):
        return FakeTool(0, out) if cls.binary == "ibstat" else FakeTool(127, "", "bash: x: command not found")

    monkeypatch.setattr(stack_checks, "_reader", lambda ctx: StackReader(tools, Host("/nonexistent"), "6.8.0-90-generic"))
    result = stack_checks.check_ib_ports(Ctx({"rdma_ports": [{"count": 1, "link_layer": "InfiniBand", "rate": 400}]}, None))
    assert result["status"] == status, result
    for word in words:
        assert word in result["message"], (word, result["message"])


def test_check_skips_without_ports_in_the_bom_and_runs_nothing(monkeypatch):
    monkeypatch.setattr(stack_checks, "_reader", lambda ctx: pytest.fail("no tool may run when the BOM names no port"))
    result = stack_checks.check_ib_ports(Ctx({"peermem": True}, None))
    assert (result["status"], result["message"]) == ("skip", "the BOM names no InfiniBand / RoCE port (expected_stack.rdma_ports): nothing to check")
