"""Fleet spec of the node simulator: the shipped specs expand as documented, mistakes are named."""

from __future__ import annotations

import copy
import pathlib
import sys

import pytest
import yaml

TESTS = pathlib.Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import fleet, spec  # noqa: E402

SPECS = TESTS / "gpusim" / "specs"

MINIMAL = {
    "fleet": {"name": "t"},
    "skus": {
        "hgx": {
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_count": 8,
            "nvswitch": True,
            "cpus": 4,
            "nics": [{"type": "ConnectX-7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax", "fw": "28.43.1014", "count": 2}],
            "bom": {"driver": {"version": "570.124.06"}},
        },
    },
    "nodes": [{"count": 2, "prefix": "n", "sku": "hgx", "driver": "570.124.06"}],
}


def minimal(**changes):
    data = copy.deepcopy(MINIMAL)
    for dotted, value in changes.items():
        target = data
        *path, last = dotted.split("__")
        for key in path:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value
    return data


def _named(names):
    data = minimal()
    data["nodes"][0] = {"names": names, "sku": "hgx", "driver": "570.124.06"}
    return data


def test_e2e_spec_expands_with_its_drift():
    fl = spec.load(SPECS / "e2e-8.yml")
    names = [n.name for n in fl.nodes]
    assert names == ["h100-01", "h100-02", "h100-03", "h100-04", "h200-01", "h200-02", "h200-03", "h200-04"]
    assert {n.spec["sku"] for n in fl.nodes} == {"hgx_h100", "hgx_h200"}
    by = {n.name: n for n in fl.nodes}
    assert by["h100-04"].spec["driver"] == "550.90.07"
    assert by["h100-04"].spec["fabricmanager"] == "550.90.07"  # NVSwitch SKU: fabric manager follows the driver
    assert by["h100-01"].spec["driver"] == "570.124.06"
    assert by["h200-03"].spec["vbios"] == "96.00.A5.00.02"
    assert by["h200-02"].spec["vbios"] is None
    assert [nic["fw"] for nic in by["h200-04"].spec["nics"]] == ["28.40.1000", "28.43.1014", "28.43.1014", "28.43.1014"]
    assert [nic["fw"] for nic in by["h200-03"].spec["nics"]] == ["28.43.1014"] * 4
    assert by["h100-01"].spec["jobs"] == 1
    assert by["h100-02"].spec["jobs"] == 0
    assert by["h100-01"].address == "127.0.20.1"
    assert by["h200-04"].address == "127.0.20.8"
    assert by["h100-01"].spec["timing"]["reboot"] == 2.0
    assert by["h100-01"].spec["timing"]["diag"] == {1: 0.5, 2: 1.0, 3: 2.0}
    assert fl.slurm_port == 16900
    assert fl.slurmd_port(7) == 16908


def test_demo_spec_has_three_skus_and_drift():
    fl = spec.load(SPECS / "demo-16.yml")
    assert len(fl.nodes) == 16
    assert set(fl.skus) == {"hgx_h100", "l40s_pcie", "hgx_b200"}
    assert fl.skus["hgx_h100"]["nvswitch"] is True
    assert fl.skus["l40s_pcie"]["gpu_model"] == "NVIDIA L40S"
    by = {n.name: n.spec for n in fl.nodes}
    assert by["l40s-01"]["fabricmanager"] is None  # PCIe SKU: no fabric manager
    assert by["l40s-05"]["kernel_module"] == "proprietary"
    assert by["h100-06"]["fabricmanager"] == "565.57.01"
    assert by["h100-06"]["driver"] == "570.124.06"
    assert by["b200-04"]["faults"] == [{"kind": "thermal_slowdown", "gpu": 3}]
    assert by["h100-01"]["kernel"] == "6.1.0-18-amd64"
    assert len({n.address for n in fl.nodes}) == 16


def test_node_spec_has_every_contract_key():
    node_spec = spec.parse(MINIMAL).nodes[0].spec
    assert set(node_spec) == {"name", "sku", "gpu_model", "gpu_count", "nvswitch", "driver", "kernel_module", "fabricmanager",
                              "vbios", "gpu_firmware", "nics", "kernel", "faults", "timing", "perf", "jobs"}
    assert node_spec["nics"][0] == {"type": "ConnectX-7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax", "fw": "28.43.1014"}
    assert len(node_spec["nics"]) == 2
    assert node_spec["name"] == "n01"


def test_node_specs_do_not_share_lists():
    nodes = spec.parse(MINIMAL).nodes
    nodes[0].spec["nics"][0]["fw"] = "1.2.3"
    nodes[0].spec["faults"].append({"kind": "xid79"})
    assert nodes[1].spec["nics"][0]["fw"] == "28.43.1014"
    assert nodes[1].spec["faults"] == []


def test_fault_shorthand_and_params():
    fl = spec.parse(minimal(nodes__0__faults=["no_return", {"kind": "xid79", "gpu": 2}]))
    assert fl.nodes[0].spec["faults"] == [{"kind": "no_return"}, {"kind": "xid79", "gpu": 2}]


def test_bmcs_have_a_management_network_of_their_own():
    fl = spec.parse(minimal(fleet={"name": "t", "loopback": 40}))
    assert [(n.address, n.bmc_address) for n in fl.nodes] == [("127.0.40.1", "127.0.140.1"), ("127.0.40.2", "127.0.140.2")]
    assert (fl.bmc_port, fl.bmc_user) == (443, "admin")
    fl = spec.parse(minimal(fleet={"name": "t", "loopback": 200, "bmc_loopback": 61, "bmc_port": 8443, "bmc_user": "ops"}))
    assert fl.nodes[1].bmc_address == "127.0.61.2" and (fl.bmc_port, fl.bmc_user) == (8443, "ops")
    assert spec.parse(minimal(fleet={"name": "t", "loopback": 200})).nodes[0].bmc_address == "127.0.100.1"


def test_gpu_firmware_is_a_bundle_name_or_its_mapping():
    fl = spec.parse(minimal(skus__hgx__gpu_firmware={"version": "HGX-22.10-1"}))
    assert fl.nodes[0].spec["gpu_firmware"] == "HGX-22.10-1"
    fl = spec.parse(minimal(nodes__0__gpu_firmware="HGX-24.04-2"))
    assert fl.nodes[0].spec["gpu_firmware"] == "HGX-24.04-2"


def test_addresses_move_to_the_next_octet_after_250_nodes():
    fl = spec.parse(minimal(nodes__0__count=251, fleet={"name": "big", "loopback": 40}))
    assert fl.nodes[249].address == "127.0.40.250"
    assert fl.nodes[250].address == "127.0.41.1"


@pytest.mark.parametrize(
    ("data", "where", "what"),
    [
        pytest.param(minimal(nodes__0__sku="h200"), "nodes[0].sku", "unknown SKU 'h200'", id="unknown-sku"),
        pytest.param(minimal(nodes__0__driver="550"), "nodes[0].driver", "version like 550.90.07", id="bad-driver"),
        pytest.param(minimal(nodes__0__kernel_module="nouveau"), "nodes[0].kernel_module", "open, proprietary", id="kernel-module"),
        pytest.param(minimal(nodes__0__jobs=5), "nodes[0].jobs", "between 0 and 4", id="jobs-over-cpus"),
        pytest.param(minimal(nodes__0__faults=[{"kind": "meteor"}]), "nodes[0].faults[0].kind", "unknown fault 'meteor'", id="fault"),
        pytest.param(minimal(nodes__0__nic_fw={5: "28.40.1000"}), "nodes[0].nic_fw", "out of range 0..1", id="nic-index"),
        pytest.param(minimal(nodes__0__prefix="N_"), "nodes[0].names[0]", "not a valid host name", id="hostname"),
        pytest.param(minimal(nodes__0__names=["a"]), "nodes[0]", "either names or count", id="names-and-count"),
        pytest.param(minimal(nodes__0__drivr="1.2.3"), "nodes[0]", "unknown key(s) drivr", id="typo"),
        pytest.param(minimal(fleet={"name": "t", "ssh_port": 0}), "fleet.ssh_port", "between 1 and 65535", id="port"),
        pytest.param(minimal(timing={"reboots": 1}), "timing", "unknown key 'reboots'", id="timing-key"),
        pytest.param(minimal(timing={"diag": {4: 1}}), "timing.diag", "levels are 1, 2, 3", id="diag-level"),
        pytest.param(minimal(skus__hgx__gpu_model="NVIDIA H800"), "skus.hgx.gpu_model", "unknown GPU model", id="model"),
        pytest.param(minimal(skus__hgx__gpu_count="8"), "skus.hgx.gpu_count", "must be an integer", id="count-type"),
        pytest.param(minimal(skus__hgx__nics=[{"type": "ConnectX-7", "fw": "28.1.1"}]), "skus.hgx.nics[0]", "psid is required", id="nic-psid"),
        pytest.param(minimal(skus={"hgx-h100": MINIMAL["skus"]["hgx"]}), "skus.hgx-h100", "Ansible group names", id="sku-name"),
        pytest.param({"fleet": {"name": "t"}, "skus": {}}, "<spec>", "nodes is required", id="no-nodes"),
        pytest.param(minimal(extra=1), "<spec>", "unknown key(s) extra", id="top-key"),
        pytest.param([1, 2], "<spec>", "must be a mapping", id="not-mapping"),
        # full matches: `$` would let a trailing newline through
        pytest.param(_named(["n1\n"]), "nodes[0].names[0]", "not a valid host name", id="hostname-newline"),
        pytest.param(minimal(nodes__0__driver="570.124.06\n"), "nodes[0].driver", "version like", id="driver-newline"),
        pytest.param(minimal(fleet={"name": "t\n"}), "fleet.name", "lower-case letters", id="fleet-name-newline"),
        pytest.param(minimal(skus={"hgx\n": MINIMAL["skus"]["hgx"]}), "skus.hgx\n", "Ansible group names", id="sku-newline"),
        pytest.param(minimal(fleet={"name": "t", "loopback": 40, "bmc_loopback": 40}), "fleet.bmc_loopback",
                     "must differ from fleet.loopback", id="bmc-same-net"),
        pytest.param(minimal(fleet={"name": "t", "bmc_user": "root\n"}), "fleet.bmc_user", "must be a user name", id="bmc-user"),
        pytest.param(minimal(skus__hgx__gpu_firmware={"version": "HGX 1"}), "skus.hgx.gpu_firmware.version",
                     "bundle name like HGX-22.10-1", id="gpu-firmware"),
    ],
)
def test_mistakes_name_the_place_and_the_rule(data, where, what):
    with pytest.raises(spec.SpecError) as info:
        spec.parse(data)
    message = str(info.value)
    assert message.startswith(f"{where}: "), message
    assert what in message, message


def test_duplicate_node_names_are_refused():
    data = minimal()
    data["nodes"].append({"names": ["n02"], "sku": "hgx"})
    with pytest.raises(spec.SpecError, match=r"nodes\[1\]: node 'n02' is already defined in nodes\[0\]"):
        spec.parse(data)


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(spec.SpecError, match="cannot read the fleet spec"):
        spec.load(tmp_path / "absent.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("fleet: [unclosed\n")
    with pytest.raises(spec.SpecError, match=r"bad\.yml: not valid YAML"):
        spec.load(bad)
    wrong = tmp_path / "wrong.yml"
    wrong.write_text(yaml.safe_dump(minimal(nodes__0__sku="x")))
    with pytest.raises(spec.SpecError, match=r"nodes\[0\]\.sku"):
        spec.load(wrong)


def test_fault_parameters_are_yaml_scalars():
    assert fleet.parse_params(["gpu=3", "when=boot", "fatal=true", "rate=0.5", "psid="]) == {
        "gpu": 3, "when": "boot", "fatal": True, "rate": 0.5, "psid": ""}
    with pytest.raises(fleet.FleetError, match="not key=value"):
        fleet.parse_params(["gpu"])
