"""Tests of the ibstat / ibstatus / ibv_devinfo parsers, on every real capture under stack/ib."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.infiniband import (
    command_missing,
    parse_ibstat,
    parse_ibstatus,
    parse_ibv_devinfo,
)

from tests.conftest import real_files, real_params

A = ("Active", "LinkUp")
DOWN = ("Down", "Disabled")
# What each real file holds for each tool, read by hand: {(state, physical state, rate or None, link layer): port count},
# and the error lines. A file not named for a tool must be refused by that tool's parser (ParseError).
IBSTAT = {
    # 8 CX-7 NDR and one BlueField bond at 200 on Ethernet.
    "ibstat_8xCX7-NDR400-IB_28.41.1000_H100_all-active_gpud.txt": ({(*A, 400, "InfiniBand"): 8, (*A, 200, "Ethernet"): 1}, 0),
    # The Down port reports Rate: 10: not a rate it runs at, so unknown (None).
    "ibstat_A100-host_CX6-MT4123_20.33.1048_HDR200-Active_and_DOWN-Disabled-Rate10_nccl-tests128_partial.txt": (
        {(*A, 200, "InfiniBand"): 1, (*DOWN, None, "InfiniBand"): 1},
        0,
    ),
    "ibstat_A100_8xCX6-HDR200_partial_ibpanic-exit255_gpud.txt": ({(*A, 200, "InfiniBand"): 8}, 1),
    "ibstat_B300-node_8xCX8-MT4131_40.46.5500_DOWN-Disabled-Rate10_4xCX7-MT4129_28.47.2526_IB-Active-Rate100_no-MOFED_KR-notes.txt": (
        {(*DOWN, None, "InfiniBand"): 7, (*A, 100, "InfiniBand"): 4},  # the capture lists 11 CAs (7 CX-8, 4 CX-7)
        0,
    ),
    "ibstat_CX6Dx-MT4125_22.32.2004_Eth-Rate100_l2fwd-nv6.txt": ({(*A, 100, "Ethernet"): 2}, 0),
    "ibstat_CX7-MT4129_28.39.1002_RoCE-Rate200_Mooncake1999_partial.txt": ({(*A, 200, "Ethernet"): 2}, 0),
    # gpud's captures end without a newline: the last line is a whole link layer, so it is read.
    "ibstat_H100_8xCX7-RoCE-400_2xCX6Dx-100_28.39.1002_all-active_gpud.txt": ({(*A, 400, "Ethernet"): 8, (*A, 100, "Ethernet"): 4}, 0),
    "ibstat_H100_RoCE_some-DOWN-Disabled_gpud.txt": ({(*A, 400, "InfiniBand"): 8, (*A, 100, "Ethernet"): 1, (*DOWN, None, "Ethernet"): 3}, 0),
    "ibstat_H20_CX7-MT4129_28.43.2026_IB-NDR-Rate400_Active_DeepEP303_partial.txt": ({(*A, 400, "InfiniBand"): 2}, 0),
}
IBSTATUS = {
    "ibstatus_BF3-integrated-CX7_mlx5_bond_RoCE_200Gb-2X-NDR_Ethernet_sglang-docs.txt": ({(*A, 200, "Ethernet"): 4}, 0),
    "ibstatus_FATAL_sys-files-not-found_IB-driver-not-loaded_trinity219.txt": ({}, 1),
}
IBV_DEVINFO = {
    "ibv_devinfo_H100_CX7-4129_28.39.2048_IB_PORT_DOWN_port_lid-65535_DeepEP38_partial.txt": ({("Down", None, None, "InfiniBand"): 1}, 0),
    # ibv_devinfo prints no rate: unknown even where the port is Active.
    "ofed_info-s_23.10-1.1.9.0_and_ibv_devinfo_Azure-ND-H200-v5_8xCX7-VF-4126_28.40.1702_IB_plus_CX5-VF-Ethernet.txt": (
        {("Active", None, None, "InfiniBand"): 8, ("Active", None, None, "Ethernet"): 1},
        0,
    ),
}
PARSERS = {"ibstat": (parse_ibstat, IBSTAT), "ibstatus": (parse_ibstatus, IBSTATUS), "ibv_devinfo": (parse_ibv_devinfo, IBV_DEVINFO)}


def _summary(result):
    counts = {}
    for port in result["ports"]:
        key = (port["state"], port["physical_state"], port["rate_gbps"], port["link_layer"])
        counts[key] = counts.get(key, 0) + 1
    return counts, len(result["errors"])


@pytest.mark.parametrize("tool", sorted(PARSERS))
@pytest.mark.parametrize("path", real_params("stack/ib/*"))
def test_real(tool, path):
    parse, table = PARSERS[tool]
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.name not in table:
        with pytest.raises(ParseError, match=tool):
            parse(text)
        return
    assert _summary(parse(text)) == table[path.name]


def test_real_ibpanic_names_the_device():
    files = real_files("stack/ib/ibstat_A100_8xCX6*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    [path] = files
    result = parse_ibstat(path.read_text())
    assert "mlx5_8" in result["errors"][0]
    assert [p["device"] for p in result["ports"]] == [f"mlx5_{n}" for n in range(8)]
    assert {p["firmware"] for p in result["ports"]} == {"20.41.1000"}


IBSTAT_PORT = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: {state}
\t\tPhysical state: {phys}
\t\tRate: {rate}
\t\tLink layer: InfiniBand
"""


@pytest.mark.parametrize(
    ("state", "phys", "rate", "expected"),
    [
        ("Active", "LinkUp", "400", (400, True)),
        ("Active", "LinkUp", "2.5", (2.5, True)),
        # Never trust the rate of a port that is not Active.
        ("Down", "Polling", "10", (None, False)),
        ("Initializing", "LinkUp", "400", (None, False)),
        ("Armed", "LinkUp", "400", (None, False)),
    ],
)
def test_rate_only_when_active(state, phys, rate, expected):
    [port] = parse_ibstat(IBSTAT_PORT.format(state=state, phys=phys, rate=rate))["ports"]
    assert (port["rate_gbps"], port["active"]) == expected
    assert (port["state"], port["physical_state"]) == (state, phys)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (IBSTAT_PORT.format(state="Active", phys="LinkUp", rate="400").replace("\t\tLink layer: InfiniBand\n", ""), "mlx5_0 port 1 has no 'Link layer'"),
        (IBSTAT_PORT.format(state="Active", phys="LinkUp", rate="400").replace("\t\tRate: 400\n", ""), "mlx5_0 port 1 has no 'Rate'"),
        (IBSTAT_PORT.format(state="Bogus", phys="LinkUp", rate="400"), "state 'Bogus'"),
        (IBSTAT_PORT.format(state="Active", phys="LinkUp", rate="fast"), "rate 'fast'"),
        (IBSTAT_PORT.format(state="Active", phys="LinkUp", rate="400").replace("InfiniBand", "Token Ring"), "link layer 'Token Ring'"),
        (IBSTAT_PORT.format(state="Active", phys="LinkUp", rate="400").replace("ports: 1", "ports: 2"), "declares 2 port"),
        # Cut inside the rate: the last line is not read, the port has no link layer.
        (IBSTAT_PORT.format(state="Active", phys="LinkUp", rate="400").split("\t\tRate", maxsplit=1)[0] + "\t\tRate: 40", "has no 'Rate'"),
        ("", 'no "CA'),
    ],
)
def test_ibstat_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_ibstat(text)


def test_ibstatus_states_by_number():
    text = (
        "Infiniband device 'mlx5_0' port 1 status:\n\tstate:\t 2: INIT\n\tphys state:\t 2: Polling\n\trate:\t 400 Gb/sec (4X NDR)\n\tlink_layer:\t InfiniBand\n"
    )
    [port] = parse_ibstatus(text)["ports"]
    assert (port["state"], port["physical_state"], port["rate_gbps"], port["width"]) == ("Initializing", "Polling", None, None)


def test_ibv_devinfo_command_not_found():
    assert command_missing("bash: ibv_devinfo: command not found\n")
    with pytest.raises(ParseError, match="ibv_devinfo: the command is not installed"):
        parse_ibv_devinfo("Command 'ibv_devinfo' not found, but can be installed with:\nsudo apt install ibverbs-utils\n")
