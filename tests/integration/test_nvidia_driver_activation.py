"""nvidia_driver with the package method over real SSH, and the role's activation reboot (gpusim).

Brings up tests/fixtures/driver/fleet-driver-activation.yml once for the file: three nodes on driver 550.90.07,
recorded in the simulator as installed from NVIDIA's apt repository (nvidia-driver-550-open, and
nvidia-fabricmanager-550 on the NVSwitch nodes, held), the way a node provisioned with `method: package` is.

- pkg-hgx (NVSwitch) and pkg-pcie: `ansible NODE -m gpufleet.lifecycle.nvidia_driver -a '{method: package}'`
  upgrades to 570.124.06 in four steps (check, real, idempotent, idempotent check) with the node's simulated
  apt-get / apt-mark / dpkg-query; the packages end held (`apt-mark showhold` over SSH); a hold released over
  SSH is reported (check and real) and restored.
- busy-pcie carries the modules_busy fault (a /dev/nvidia* handle outside nvidia-smi's view: rmmod answers
  "Module nvidia is in use"): with the default busy_modules: refuse the module fails and installs nothing.
- boot-hgx carries the same fault: the role's main entry point with nvidia_driver_busy_modules: reboot installs the
  packages beside the loaded modules,
  the module returns reboot_required, the role's handler reboots the node exactly once
  (ansible.builtin.reboot through the simulator's supervisor) and the role's verification passes on the new driver.

Each node keeps its node state file under /var/lib/gpusim (its own folder), and the kernel is not held:
the nodes share the controller's filesystem elsewhere. Needs root and the simulator's packages
(tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_nvidia_driver_activation.py -m integration -q
"""

from __future__ import annotations

import json
import pathlib

import pytest
from fleet import TESTS, fleet_up, json_doc, needs_fleet
from fleet import Fleet as BaseFleet
from gpusim import state as gstate

SPEC = TESTS / "fixtures" / "driver" / "fleet-driver-activation.yml"
OLD, NEW = "550.90.07", "570.124.06"
STATE_FILE = "/var/lib/gpusim/gpufleet.fact"  # inside the node's own folder (see the module docstring)
PACKAGE = {"method": "package", "package_manager": "apt"}

pytestmark = needs_fleet()

ROLE_PLAYBOOK = """
- name: nvidia_driver role on simulated nodes
  hosts: "{{ targets }}"
  gather_facts: false
  tasks:
    - name: Run the role's main entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.nvidia_driver
"""


class Fleet(BaseFleet):
    def __init__(self, workdir: pathlib.Path):
        super().__init__(workdir)
        self.playbook = workdir / "role.yml"
        self.playbook.write_text(ROLE_PLAYBOOK)

    def module(self, pattern: str, args: dict, *, check: bool = False) -> dict[str, dict]:
        """`ansible PATTERN -m gpufleet.lifecycle.nvidia_driver -a ARGS` -> {host: result}."""
        return super().module("gpufleet.lifecycle.nvidia_driver", pattern, dict(args, state_file=STATE_FILE), check=check, diff=True)

    def role(self, targets: str, extra: dict) -> dict:
        """The role's main entry point with the json callback: the callback's document (plays, tasks, stats)."""
        variables = {"targets": targets, "nvidia_driver_state_file": STATE_FILE, "nvidia_driver_hold_kernel": False,
                     "nvidia_driver_reboot_timeout": 120, **extra}
        return json_doc(self.ansible_playbook(self.playbook, "-e", json.dumps(variables), json_output=True))

    def sim(self, name: str) -> dict:
        """The simulator's state of the node (what the hardware and the package database say)."""
        return gstate.load(self.node_dir(name))

    def fact(self, name: str) -> dict:
        """The node state file the module wrote on that node (/var/lib/gpusim is the node's own folder)."""
        return json.loads((self.node_dir(name) / "gpufleet.fact").read_text())

    def smi_version(self, name: str) -> str:
        versions = set(self.ssh_ok(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split())
        assert len(versions) == 1, versions
        return versions.pop()

    def boot_id(self, name: str) -> str:
        return self.ssh_ok(name, "cat /proc/sys/kernel/random/boot_id").strip()


def provision_by_apt(state: dict) -> None:
    """The driver (and fabric manager) of the spec as apt installed them with method: package, held."""
    assert (state["driver"]["version"], state["driver"]["flavor"]) == (OLD, "open")  # as the spec says
    state["driver"].update(method="package", dkms=True)
    held = ["nvidia-driver-550-open"]
    if state.get("fabricmanager"):
        assert state["fabricmanager"]["version"] == OLD
        held.append("nvidia-fabricmanager-550")
    state.setdefault("apt", {})["held"] = held


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_up(SPEC, tmp_path_factory.mktemp("gpusim-driver-activation") / "fleet") as workdir:
        fleet = Fleet(workdir)
        for name in fleet.address:
            gstate.update(fleet.node_dir(name), provision_by_apt)
        yield fleet


# --- the package method over SSH: upgrade in four steps -----------------------------------------------

@pytest.fixture(scope="module")
def upgraded(fleet):
    steps = {}
    for step, check in (("check", True), ("real", False), ("idempotent", False), ("idempotent_check", True)):
        steps[step] = fleet.module("pkg-hgx,pkg-pcie", dict(PACKAGE, version=NEW), check=check)
        for host, result in steps[step].items():
            assert not result.get("failed"), (step, host, result.get("msg"))
    return steps


def test_package_upgrade_changes_once_in_four_steps(upgraded):
    for host in ("pkg-hgx", "pkg-pcie"):
        assert {step: results[host]["changed"] for step, results in upgraded.items()} == {
            "check": True, "real": True, "idempotent": False, "idempotent_check": False,
        }
        check, real = upgraded["check"][host], upgraded["real"][host]
        # The package database said 550 (provisioned by apt, held) before anything ran.
        assert check["before"]["driver"]["installed_version"] == OLD and check["before"]["driver"]["held"] is True
        assert check["plan"]["driver"] == {
            "action": "upgrade", "before": OLD, "after": NEW, "kernel_module_before": "open", "kernel_module_after": "open",
        }
        assert check["after"] == check["before"]
        assert real["reboot_required"] is False
        assert real["after"]["driver"]["installed_version"] == NEW
        assert real["after"]["driver"]["loaded_version"] == NEW
        assert real["after"]["driver"]["nvidia_smi_version"] == NEW
        assert real["after"]["driver"]["held"] is True
        for step in ("idempotent", "idempotent_check"):
            assert upgraded[step][host]["plan"]["driver"]["action"] == "none"
    assert upgraded["real"]["pkg-hgx"]["plan"]["fabricmanager"] == {"action": "upgrade", "before": OLD, "after": NEW, "managed": True}
    assert upgraded["real"]["pkg-pcie"]["plan"]["fabricmanager"] == {"action": "none", "before": None, "after": None, "managed": False}


def test_package_upgrade_reaches_the_node(fleet, upgraded):
    for host in ("pkg-hgx", "pkg-pcie"):
        assert fleet.smi_version(host) == NEW
        sim = fleet.sim(host)
        assert (sim["driver"]["version"], sim["driver"]["method"], sim["driver"]["staged"]) == (NEW, "package", None)
        assert sim["boot_count"] == 0  # activated in place: no reboot
        assert sim["services"]["nvidia-persistenced"]["active"] and sim["services"]["nvidia-dcgm"]["active"]
        fact = fleet.fact(host)
        assert fact["last_known_good"]["driver"]["version"] == OLD
        assert fact["last_known_good"]["driver"]["method"] == "package"
        assert [(h["action"], h["result"]) for h in fact["history"]] == [("upgrade", "started"), ("upgrade", "ok")]
    assert fleet.ssh_ok("pkg-hgx", "systemctl is-active nvidia-fabricmanager").strip() == "active"
    query = fleet.ssh_ok("pkg-hgx", "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-*'")
    assert query == f"nvidia-driver-570-open {NEW}-1 hi \nnvidia-fabricmanager-570 {NEW}-1 hi \n"


def test_package_upgrade_holds_the_packages(fleet, upgraded):
    assert fleet.ssh_ok("pkg-hgx", "apt-mark showhold") == "nvidia-driver-570-open\nnvidia-fabricmanager-570\n"
    assert fleet.ssh_ok("pkg-pcie", "apt-mark showhold") == "nvidia-driver-570-open\n"


# --- a released hold is found and restored -------------------------------------------------------------

@pytest.fixture(scope="module")
def rehold(fleet, upgraded):
    released = fleet.ssh_ok("pkg-hgx", "apt-mark unhold nvidia-driver-570-open")
    shown = fleet.ssh_ok("pkg-hgx", "apt-mark showhold")
    steps = {}
    for step, check in (("check", True), ("real", False), ("idempotent", False)):
        steps[step] = fleet.module("pkg-hgx", dict(PACKAGE, version=NEW), check=check)["pkg-hgx"]
        assert not steps[step].get("failed"), (step, steps[step].get("msg"))
        steps[step + "_showhold"] = fleet.ssh_ok("pkg-hgx", "apt-mark showhold")
    return released, shown, steps


def test_released_hold_is_detected_and_restored(fleet, rehold):
    released, shown, steps = rehold
    assert released == "Canceled hold on nvidia-driver-570-open.\n"
    assert shown == "nvidia-fabricmanager-570\n"
    check, real, again = steps["check"], steps["real"], steps["idempotent"]
    assert check["before"]["driver"]["held"] is False
    assert (check["changed"], check["plan"]["driver"]["action"]) == (True, "hold")
    assert steps["check_showhold"] == "nvidia-fabricmanager-570\n"  # check mode held nothing
    assert (real["changed"], real["plan"]["driver"]["action"], real["reboot_required"]) == (True, "hold", False)
    assert real["after"]["driver"]["held"] is True
    assert steps["real_showhold"] == "nvidia-driver-570-open\nnvidia-fabricmanager-570\n"
    assert (again["changed"], again["plan"]["driver"]["action"]) == (False, "none")
    # Holding touches neither the driver nor the fabric manager.
    assert fleet.smi_version("pkg-hgx") == NEW
    assert fleet.sim("pkg-hgx")["boot_count"] == 0


# --- modules that cannot be unloaded in place: refused by default ---------------------------------------

def test_busy_modules_refused_by_default(fleet):
    result = fleet.module("busy-pcie", dict(PACKAGE, version=NEW))["busy-pcie"]
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("cannot unload the nvidia kernel modules (rmmod failed with exit status 1: ")
    assert "Module nvidia is in use" in result["msg"] and "nothing was installed" in result["msg"]
    assert result["node_state"]["driver_installed"] == OLD and result["node_state"]["driver_loaded"] == OLD
    # Nothing installed: the holder of /dev/nvidia* keeps the libraries it runs on, and the old driver answers.
    assert fleet.smi_version("busy-pcie") == OLD
    assert fleet.ssh_ok("busy-pcie", "dpkg-query -W -f='${Package} ${Version}\\n' 'nvidia-*'") == f"nvidia-driver-550-open {OLD}-1\n"
    sim = fleet.sim("busy-pcie")
    assert (sim["driver"]["version"], sim["driver"]["staged"], sim["boot_count"]) == (OLD, None, 0)
    assert "nvidia" in sim["modules"]
    assert sim["services"]["nvidia-persistenced"]["active"] and sim["services"]["nvidia-dcgm"]["active"]
    assert [h["result"] for h in fleet.fact("busy-pcie")["history"]] == ["started", "failed"]


# --- the role's reboot path: modules that cannot be unloaded in place -----------------------------------

def tasks(doc: dict, name: str) -> list[dict[str, dict]]:
    """{host: result} of each task run whose name ends with `name` (role tasks are prefixed with the role)."""
    return [t["hosts"] for play in doc["plays"] for t in play["tasks"] if t["task"]["name"].endswith(name)]


@pytest.fixture(scope="module")
def rebooted(fleet):
    before = {"sim": fleet.sim("boot-hgx"), "boot_id": fleet.boot_id("boot-hgx")}
    doc = fleet.role("boot-hgx", {"nvidia_driver_version": NEW, "nvidia_driver_method": "package", "nvidia_driver_package_manager": "apt",
                                  "nvidia_driver_busy_modules": "reboot"})
    return before, doc


def test_busy_modules_install_then_reboot_once(fleet, rebooted):
    before, doc = rebooted
    assert doc["stats"]["boot-hgx"]["failures"] == 0 and doc["stats"]["boot-hgx"]["unreachable"] == 0, doc["stats"]
    assert [f["kind"] for f in before["sim"]["faults"]] == ["modules_busy"] and before["sim"]["boot_count"] == 0
    [kept] = tasks(doc, "Keep the installer's result")  # the async job's result, as the role keeps it
    result = kept["boot-hgx"]["ansible_facts"]["__nvidia_driver_result"]
    assert result["changed"] is True and result["reboot_required"] is True
    assert result["plan"]["driver"]["action"] == "upgrade"
    assert any("could not be unloaded" in w and "Module nvidia is in use" in w for w in result.get("warnings", [])), result.get("warnings")
    # Installed beside the loaded 550 modules: the packages say 570, the kernel still runs 550.
    assert (result["after"]["driver"]["installed_version"], result["after"]["driver"]["loaded_version"]) == (NEW, OLD)
    [reboot] = tasks(doc, "Reboot to load the new kernel modules")
    assert reboot["boot-hgx"]["rebooted"] is True and reboot["boot-hgx"]["changed"] is True
    sim = fleet.sim("boot-hgx")
    assert sim["boot_count"] == 1  # exactly one reboot
    assert fleet.boot_id("boot-hgx") == sim["boot_id"] != before["boot_id"]


def test_role_verifies_the_driver_after_the_reboot(fleet, rebooted):
    _before, doc = rebooted
    for name in ("Check that the driver answers with the expected version", "Check that the fabric manager matches the driver on NVSwitch systems"):
        [check] = tasks(doc, name)
        assert not check["boot-hgx"].get("failed") and not check["boot-hgx"].get("skipped"), (name, check)
    [facts] = tasks(doc, "Read the driver after activation")
    assert facts["boot-hgx"]["ansible_facts"]["gpufleet"]["driver"]["version"] == NEW
    assert fleet.smi_version("boot-hgx") == NEW
    assert fleet.ssh_ok("boot-hgx", "systemctl is-active nvidia-fabricmanager").strip() == "active"
    assert fleet.ssh_ok("boot-hgx", "apt-mark showhold") == "nvidia-driver-570-open\nnvidia-fabricmanager-570\n"
    sim = fleet.sim("boot-hgx")
    assert (sim["driver"]["version"], sim["driver"]["staged"], sim["faults"]) == (NEW, None, [])
    history = fleet.fact("boot-hgx")["history"]
    assert [(h["action"], h["before"], h["after"], h["result"]) for h in history] == [
        ("upgrade", OLD, NEW, "started"), ("upgrade", OLD, NEW, "reboot_required"),
    ]


def test_module_is_idempotent_after_the_reboot(fleet, rebooted):
    result = fleet.module("boot-hgx", dict(PACKAGE, version=NEW))["boot-hgx"]
    assert not result.get("failed"), result.get("msg")
    assert (result["changed"], result["plan"]["driver"]["action"], result["reboot_required"]) == (False, "none", False)
    assert fleet.sim("boot-hgx")["boot_count"] == 1
