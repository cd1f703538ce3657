"""gpu_facts' stack subset (issue 24): what it reads, the processes it starts, absent tools, unreadable output."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.modules import gpu_facts

from tests.unit.plugins.modules.test_gpu_facts import full_node, node  # noqa: F401 # pylint: disable=unused-import

IBSTAT = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tLink layer: InfiniBand
"""
LSMOD = """Module                  Size  Used by
nvidia_peermem         16384  0
mlx5_core            2113536  1 mlx5_ib
nvidia              104964096  96 nvidia_peermem
"""


def modinfo(name, version, signer=None):
    signed = f"sig_id:         PKCS#7\nsigner:         {signer}\nsig_key:        61:FE\n" if signer else ""
    return f"filename:       /lib/modules/6.1.0-28-amd64/updates/dkms/{name}.ko\nversion:        {version}\nname:           {name}\n{signed}"


def stack_node(commands, make_root, mokutil="SecureBoot enabled\n"):
    full_node(commands, make_root)
    tools = {name: commands.tool(name) for name in ("ofed_info", "ibstat", "lsmod", "modinfo", "mokutil", "dkms", "dcgmi", "nv-hostengine")}
    commands.on([tools["ofed_info"], "-s"], stdout="OFED-internal-24.10-1.1.4.0.200:\n")
    commands.on([tools["ibstat"]], stdout=IBSTAT)
    commands.on([tools["lsmod"]], stdout=LSMOD)
    commands.on([tools["modinfo"], "nvidia"], stdout=modinfo("nvidia", "550.90.07", "DKMS module signing key"))
    commands.on([tools["modinfo"], "nvidia_peermem"], stdout=modinfo("nvidia-peermem", "550.90.07", "DKMS module signing key"))
    commands.on([tools["modinfo"], "mlx5_core"], stdout=modinfo("mlx5_core", "24.10-1.1.4", "Mellanox Technologies signing key"))
    commands.on([tools["mokutil"], "--sb-state"], rc=0 if "enabled" in mokutil else 1, stdout=mokutil)
    commands.on([tools["mokutil"], "--list-enrolled"], stdout="2bb010e24d DKMS module signing key\n")
    commands.on([tools["dkms"], "status"], stdout="nvidia/550.90.07, 6.1.0-20-amd64, x86_64: installed\n")
    commands.on([tools["dcgmi"], "--version"], stdout="\ndcgmi  version: 4.7.0\n\n")
    commands.on([tools["nv-hostengine"], "--version"], stdout="Version : 4.7.0\nBuild ID : 24637\nBranch Name : v4.7.0\n")
    return tools


def test_stack_facts_and_exact_commands(commands, node, run_module):  # noqa: F811 - the node fixture
    tools = stack_node(commands, node)
    facts = run_module(gpu_facts.main, {"gather_subset": ["all", "stack"]})["ansible_facts"]["gpufleet"]
    stack = facts["stack"]
    assert stack["ofed"] == {"installed": True, "flavor": "doca-ofed", "version": "24.10-1.1.4.0.200", "release": "OFED-internal-24.10-1.1.4.0.200"}
    assert [(p["device"], p["state"], p["rate_gbps"]) for p in stack["rdma"]["ports"]] == [("mlx5_0", "Active", 400), ("mlx5_1", "Down", None)]
    assert stack["modules"]["nvidia_peermem"]["loaded"] is True and stack["modules"]["nvidia_peermem"]["signer"] == "DKMS module signing key"
    assert stack["modules"]["mlx5_core"]["version"] == "24.10-1.1.4"
    assert stack["secure_boot"]["state"] == "enabled" and stack["secure_boot"]["enrolled_keys"] == [{"sha1": "2bb010e24d", "cn": "DKMS module signing key"}]
    assert stack["dcgm"] == {"installed": True, "version": "4.7.0", "hostengine_version": "4.7.0"}
    # The NVIDIA DKMS module is installed for 6.1.0-20 only; the node runs 6.1.0-28.
    assert stack["dkms"]["nvidia"]["built_for_running_kernel"] is False
    assert any("not for the running kernel 6.1.0-28-amd64" in problem for problem in stack["problems"])
    stack_calls = sorted(call["argv"] for call in commands.calls if call["argv"][0] in tools.values())
    assert stack_calls == sorted(
        [
            [tools["ofed_info"], "-s"],
            [tools["ibstat"]],
            [tools["lsmod"]],
            [tools["modinfo"], "nvidia"],
            [tools["modinfo"], "nvidia_peermem"],
            [tools["modinfo"], "mlx5_core"],
            [tools["mokutil"], "--sb-state"],
            [tools["mokutil"], "--list-enrolled"],
            [tools["dkms"], "status"],
            [tools["dcgmi"], "--version"],
            [tools["nv-hostengine"], "--version"],
        ]
    )
    assert facts["commands_run"] == 5 + 11


def test_all_does_not_gather_the_stack(commands, node, run_module):  # noqa: F811
    stack_node(commands, node)
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    assert "stack" not in facts and facts["commands_run"] == 5


def test_absent_tools_are_absent_not_errors(commands, node, run_module):  # noqa: F811
    full_node(commands, node)
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver", "stack"]})["ansible_facts"]["gpufleet"]
    stack = facts["stack"]
    assert stack["ofed"]["flavor"] == "inbox" and stack["ofed"]["installed"] is False
    assert stack["rdma"] == {"source": None, "ports": None, "errors": []}
    assert stack["modules"]["nvidia_peermem"] == {
        "loaded": None,
        "installed": False,
        "version": None,
        "signer": None,
        "signed": None,
        "filename": None,
        "vermagic": None,
    }
    assert stack["secure_boot"]["state"] is None and stack["dkms"]["installed"] is False and stack["dcgm"]["installed"] is False


@pytest.mark.parametrize(
    ("sb_state", "expected"),
    [
        ("SecureBoot disabled\n", "disabled"),
        ("", "not_supported"),  # on stderr: EFI variables are not supported
    ],
)
def test_secure_boot_off_lists_no_keys(commands, node, run_module, sb_state, expected):  # noqa: F811
    tools = stack_node(commands, node, mokutil=sb_state)
    if not sb_state:
        commands.on([tools["mokutil"], "--sb-state"], rc=1, stderr="EFI variables are not supported on this system\n")
    stack = run_module(gpu_facts.main, {"gather_subset": ["stack"]})["ansible_facts"]["gpufleet"]["stack"]
    assert stack["secure_boot"]["state"] == expected and stack["secure_boot"]["enrolled_keys"] is None
    assert [tools["mokutil"], "--list-enrolled"] not in [call["argv"] for call in commands.calls]


def test_ibv_devinfo_when_ibstat_is_absent_and_no_device(commands, node, run_module):  # noqa: F811
    full_node(commands, node)
    devinfo = commands.tool("ibv_devinfo")
    commands.on([devinfo], rc=0, stdout="", stderr="No IB devices found\n")
    stack = run_module(gpu_facts.main, {"gather_subset": ["stack"]})["ansible_facts"]["gpufleet"]["stack"]
    assert stack["rdma"] == {"source": "ibv_devinfo", "ports": [], "errors": ["No IB devices found"]}


@pytest.mark.parametrize(
    ("tool", "args", "stdout", "message"),
    [
        ("ofed_info", ["-s"], "MLNX_OFED_LINUX-23.10-1.1.9", "ofed_info -s printed unexpected output"),
        ("ibstat", [], IBSTAT.replace("\t\tRate: 400\n", ""), "mlx5_0 port 1 has no 'Rate'"),
        ("dcgmi", ["--version"], "dcgmi  version: 4.7", "dcgmi --version printed unexpected output"),
    ],
)
def test_unreadable_output_fails_naming_the_tool(commands, node, run_module, tool, args, stdout, message):  # noqa: F811
    full_node(commands, node)
    path = commands.tool(tool)
    commands.on([path, *args], stdout=stdout)
    result = run_module(gpu_facts.main, {"gather_subset": ["stack"]})
    assert result["failed"] is True and message in result["msg"]
