"""mlxfw module (and the nic_firmware role) on simulated nodes over real SSH (gpusim).

Brings up tests/fixtures/firmware/fleet-mlxfw.yml (ConnectX-7 nodes on 28.40.1000, one node with a ConnectX-6 Dx
beside it, failure nodes with their fault) once for the file, writes NIC firmware images (gpusim.artifacts) and runs
`ansible NODE -m gpufleet.lifecycle.mlxfw` against the generated inventory. The simulated mlxfwmanager, flint and
mlxfwreset on each node answer from the node's state; results are read with the json stdout callback, the firmware
from the simulator's state and from flint over SSH.

Each node keeps its node state file under /var/lib/gpusim (its own folder). Needs root and the simulator's packages
(tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_mlxfw.py -m integration -q
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import mlx as mlx_parsers
from fleet import TESTS, fleet_up, json_doc, needs_fleet
from fleet import Fleet as BaseFleet
from gpusim import artifacts
from gpusim import state as gstate

SPEC = TESTS / "fixtures" / "firmware" / "fleet-mlxfw.yml"
CX7, CX6 = "MT_0000000834", "MT_0000000359"
OLD, NEW, OLDER = "28.40.1000", "28.43.1014", "28.39.1002"
CX6_NEW = "22.43.1014"
MST0 = "/dev/mst/mt4129_pciconf0"
STATE_FILE = "/var/lib/gpusim/gpufleet.fact"  # inside the node's own folder (see the module docstring)

pytestmark = needs_fleet()

ROLE_PLAYBOOK = """
- name: nic_firmware role entry point on simulated nodes
  hosts: "{{ targets }}"
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.nic_firmware
        tasks_from: "{{ entry }}"
"""


class Fleet(BaseFleet):
    def __init__(self, workdir: pathlib.Path, images: dict[tuple[str, str], dict[str, str]], image_dir: pathlib.Path):
        super().__init__(workdir)
        self.images = images
        self.image_dir = image_dir
        self.playbook = workdir / "role.yml"
        self.playbook.write_text(ROLE_PLAYBOOK)

    def module(self, pattern: str, args: dict, *, check: bool = False, diff: bool = False) -> dict[str, dict]:
        """`ansible PATTERN -m gpufleet.lifecycle.mlxfw -a ARGS` -> {host: result}."""
        return super().module("gpufleet.lifecycle.mlxfw", pattern, dict(args, state_file=STATE_FILE), check=check, diff=diff)

    def role(self, targets: str, entry: str, extra: dict, *, check: bool = False) -> subprocess.CompletedProcess:
        variables = {"targets": targets, "entry": entry, "nic_firmware_state_file": STATE_FILE, **extra}
        return self.ansible_playbook(self.playbook, "-e", json.dumps(variables), *(["--check"] if check else []), json_output=True)

    def sim(self, name: str) -> dict:
        return gstate.load(self.node_dir(name))

    def nic(self, name: str, index: int = 0) -> tuple[str, str | None]:
        """(firmware running, firmware staged on flash) of a NIC, as the simulated hardware holds them."""
        nic = self.sim(name)["nics"][index]
        return nic["fw"], nic.get("staged_fw")

    def fact(self, name: str) -> dict:
        return json.loads((self.node_dir(name) / "gpufleet.fact").read_text())

    def flint_versions(self, name: str, device: str = MST0) -> str:
        return self.ssh_ok(name, f"flint -d {device} q")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("gpusim-mlxfw")
    workdir = base / "fleet"
    image_dir = base / "images"
    images = {}
    for psid, version, part, nic_type in (
        (CX7, OLD, "MCX755106AS-HEA_Ax", "ConnectX-7"),
        (CX7, NEW, "MCX755106AS-HEA_Ax", "ConnectX-7"),
        (CX7, OLDER, "MCX755106AS-HEA_Ax", "ConnectX-7"),
        (CX6, CX6_NEW, "MCX623106AN-CDA_Ax", "ConnectX-6 Dx"),
    ):
        path = artifacts.write_mlx_image(image_dir, psid, version, part_number=part, nic_type=nic_type)
        images[(psid, version)] = {"image": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    with fleet_up(SPEC, workdir):
        yield Fleet(workdir, images, image_dir)


def four_steps(fleet: Fleet, pattern: str, args: dict) -> dict[str, dict[str, dict]]:
    """check, real, idempotent, idempotent check: {step: {host: result}}, each run after the previous one."""
    steps = {}
    for step, check in (("check", True), ("real", False), ("idempotent", False), ("idempotent_check", True)):
        steps[step] = fleet.module(pattern, args, check=check, diff=True)
        for host, result in steps[step].items():
            assert not result.get("failed"), (step, host, result.get("msg"))
    return steps


def changed(steps: dict[str, dict[str, dict]], host: str) -> dict[str, bool]:
    return {step: results[host]["changed"] for step, results in steps.items()}


ALL_CHANGED_ONCE = {"check": True, "real": True, "idempotent": False, "idempotent_check": False}


def test_update_with_mlxfwreset_four_ways(fleet):
    steps = four_steps(fleet, "nic-01", dict(fleet.images[(CX7, NEW)], reset="mlxfwreset", rollout_id="it-9"))
    assert changed(steps, "nic-01") == ALL_CHANGED_ONCE
    real = steps["real"]["nic-01"]
    device = real["devices"][0]
    assert (device["pci"], device["psid"], device["action"], device["before"], device["after"]) == (MST0, CX7, "upgrade", OLD, NEW)
    assert (device["running_after"], device["reset_level"], real["reboot_required"]) == (NEW, 3, False)
    assert real["diff"] == {"before": {MST0: OLD}, "after": {MST0: NEW}}
    assert steps["check"]["nic-01"]["devices"][0]["action"] == "upgrade"
    assert steps["idempotent"]["nic-01"]["devices"][0]["action"] == "none"
    assert fleet.nic("nic-01") == (NEW, None)  # running after the level 3 reset, nothing left staged
    query = fleet.flint_versions("nic-01")
    assert f"FW Version:            {NEW}" in query and "FW Version(Running)" not in query
    fact = fleet.fact("nic-01")
    assert fact["last_known_good"]["nic_firmware"]["version"] == OLD
    assert [(h["component"], h["action"], h["result"], h["rollout_id"]) for h in fact["history"]] == [("nic_firmware", "upgrade", "ok", "it-9")]


def test_reset_level_comes_from_the_device(fleet):
    """nic-noreset's mlxfwreset lists level 3 as not supported: the image is burnt and the result asks for a reboot."""
    args = dict(fleet.images[(CX7, NEW)], reset="mlxfwreset")
    first = fleet.module("nic-noreset", args)["nic-noreset"]
    assert not first.get("failed"), first.get("msg")
    assert (first["changed"], first["reboot_required"]) == (True, True)
    assert "reset_level" not in first["devices"][0]
    assert any("level 3 not supported" in warning for warning in first.get("warnings", [])), first.get("warnings")
    assert fleet.nic("nic-noreset") == (OLD, NEW)
    again = fleet.module("nic-noreset", args)["nic-noreset"]
    assert (again["changed"], again["reboot_required"]) == (False, True)
    reboot = fleet.ansible("nic-noreset", "-m", "ansible.builtin.reboot", "-a", json.dumps({"reboot_timeout": 120}), timeout=200)
    assert reboot.returncode == 0, reboot.stdout + reboot.stderr
    assert fleet.nic("nic-noreset") == (NEW, None)
    after = fleet.module("nic-noreset", args)["nic-noreset"]
    assert (after["changed"], after["reboot_required"], after["devices"][0]["running_after"]) == (False, False, NEW)


def test_psid_mismatch_is_refused_and_nothing_changes(fleet):
    result = fleet.module("nic-psid", fleet.images[(CX7, NEW)])["nic-psid"]
    assert result["failed"]
    assert result["msg"].startswith(f"PSID mismatch: {MST0} (ConnectX7) has PSID MT_0000000999"), result["msg"]
    assert fleet.nic("nic-psid") == (OLD, None)
    assert not (fleet.node_dir("nic-psid") / "gpufleet.fact").exists()


def test_image_dir_updates_each_psid_and_reboot_is_left_to_the_play(fleet):
    checksums = {pathlib.Path(fleet.images[key]["image"]).name: fleet.images[key]["checksum"] for key in ((CX7, NEW), (CX6, CX6_NEW))}
    args = {"image_dir": str(fleet.image_dir), "checksums": checksums, "reset": "reboot"}
    steps = four_steps(fleet, "nic-mixed", args)
    assert changed(steps, "nic-mixed") == ALL_CHANGED_ONCE
    real = steps["real"]["nic-mixed"]
    assert real["reboot_required"] is True
    assert [(d["psid"], d["action"], d["after"]) for d in real["devices"]] == [(CX7, "upgrade", NEW), (CX6, "upgrade", CX6_NEW)]
    assert (fleet.nic("nic-mixed", 0), fleet.nic("nic-mixed", 1)) == ((OLD, NEW), ("22.41.1000", CX6_NEW))
    assert steps["idempotent_check"]["nic-mixed"]["reboot_required"] is True


def test_checksum_mismatch_and_downgrade_refused(fleet):
    wrong = dict(fleet.images[(CX7, OLDER)], checksum="sha256:" + "0" * 64)
    result = fleet.module("nic-02", wrong)["nic-02"]
    assert result["failed"] and "checksum mismatch" in result["msg"] and "Nothing was changed" in result["msg"]
    refused = fleet.module("nic-02", fleet.images[(CX7, OLDER)])["nic-02"]
    assert refused["failed"] and "a downgrade needs allow_downgrade: true" in refused["msg"], refused["msg"]
    assert fleet.nic("nic-02") == (OLD, None)
    steps = four_steps(fleet, "nic-02", dict(fleet.images[(CX7, OLDER)], allow_downgrade=True, reset="mlxfwreset"))
    assert changed(steps, "nic-02") == ALL_CHANGED_ONCE
    assert steps["real"]["nic-02"]["devices"][0]["action"] == "downgrade"
    assert fleet.nic("nic-02") == (OLDER, None)


def test_flash_failure_fails_and_is_recorded(fleet):
    result = fleet.module("nic-flashfail", dict(fleet.images[(CX7, NEW)], reset="mlxfwreset"))["nic-flashfail"]
    assert result["failed"]
    assert result["msg"].startswith(f"burning {fleet.images[(CX7, NEW)]['image']} onto {MST0} failed"), result["msg"]
    assert fleet.nic("nic-flashfail") == (OLD, None)
    fact = fleet.fact("nic-flashfail")
    assert fact["history"][-1]["result"] == "failed"
    assert fact["last_known_good"]["nic_firmware"]["version"] == OLD


UNOPENABLE_XML = (
    '<Devices><Device pciName="/dev/mst/mt4125_pciconf1" type="ConnectX6DX" psid="" partNumber="--"><Versions>'
    '<FW current="--" available="--"/></Versions><Status>Failed to open device</Status></Device></Devices>'
)


def test_device_that_cannot_be_opened_is_reported_and_never_flashed(fleet):
    """nic-bad's second NIC (ConnectX-6 Dx) cannot be opened: the ConnectX-7 is updated, the other reported with its status."""
    try:
        mlx_parsers.parse_fwmanager_xml(UNOPENABLE_XML)
    except ValueError:
        pytest.skip("the mlx parser does not yet report devices it cannot open (parser hardening, issue 8, not merged here)")
    result = fleet.module("nic-bad", dict(fleet.images[(CX7, NEW)], reset="mlxfwreset"))["nic-bad"]
    assert not result.get("failed"), result.get("msg")
    assert [(d["psid"], d["action"], d["status"]) for d in result["devices"]] == [
        (CX7, "upgrade", result["devices"][0]["status"]),
        (None, "unreadable", "Failed to open device"),
    ]
    assert any("cannot be read (status: Failed to open device)" in w for w in result.get("warnings", [])), result.get("warnings")
    assert fleet.nic("nic-bad", 0) == (NEW, None)
    assert fleet.nic("nic-bad", 1) == ("22.41.1000", None)
    named = fleet.module("nic-bad", dict(fleet.images[(CX6, CX6_NEW)], devices=[result["devices"][1]["pci"]]))["nic-bad"]
    assert named["failed"] and "cannot be read (status: Failed to open device): it is not flashed" in named["msg"], named.get("msg")
    assert fleet.nic("nic-bad", 1) == ("22.41.1000", None)


def play_stats(proc: subprocess.CompletedProcess, host: str) -> dict:
    """The json callback's stats of one host (ok, changed, failures, unreachable...)."""
    stats = json_doc(proc)["stats"]
    assert host in stats, (proc.stdout[-3000:], proc.stderr[-2000:])
    return stats[host]


def role_images(fleet: Fleet, *versions: str) -> dict:
    return {CX7: {version: {"path": fleet.images[(CX7, version)]["image"], "checksum": fleet.images[(CX7, version)]["checksum"]} for version in versions}}


def test_role_main_four_ways_then_rollback(fleet):
    extra = {"nic_firmware_versions": {CX7: NEW}, "nic_firmware_images": role_images(fleet, OLD, NEW), "nic_firmware_rollout_id": "it-role"}
    steps = {}
    for step, check in (("check", True), ("real", False), ("idempotent", False), ("idempotent_check", True)):
        proc = fleet.role("nic-role", "main", extra, check=check)
        stats = play_stats(proc, "nic-role")
        assert stats["failures"] == 0 and stats["unreachable"] == 0, (step, proc.stdout[-4000:])
        steps[step] = stats["changed"] > 0
        if step == "check":
            assert fleet.nic("nic-role") == (OLD, None)
    assert steps == ALL_CHANGED_ONCE
    assert fleet.nic("nic-role") == (NEW, None)  # mlxfwreset level 3 in place, no reboot needed
    fact = fleet.fact("nic-role")
    assert fact["last_known_good"]["nic_firmware"]["devices"] == {MST0: {"psid": CX7, "version": OLD}}
    assert fact["history"][-1]["rollout_id"] == "it-role"

    back = fleet.role("nic-role", "rollback", {"nic_firmware_images": role_images(fleet, OLD, NEW)})
    stats = play_stats(back, "nic-role")
    assert stats["failures"] == 0 and stats["changed"] > 0, back.stdout[-4000:]
    assert fleet.nic("nic-role") == (OLD, None)
    fact = fleet.fact("nic-role")
    assert fact["last_known_good"]["nic_firmware"]["version"] == OLD  # the rollback keeps it
    assert fact["history"][-1]["action"] == "downgrade"


def test_role_rollback_without_the_image_changes_nothing(fleet):
    proc = fleet.role("nic-role", "rollback", {"nic_firmware_images": role_images(fleet, NEW)})
    stats = play_stats(proc, "nic-role")
    assert stats["failures"] == 1 and stats["changed"] == 0
    assert f"needs nic_firmware_images['{CX7}']['{OLD}']" in proc.stdout
    assert fleet.nic("nic-role") == (OLD, None)


def test_role_leaves_the_reboot_to_the_rollout(fleet):
    extra = {"nic_firmware_versions": {CX7: NEW}, "nic_firmware_images": role_images(fleet, NEW), "nic_firmware_reset": "reboot", "nic_firmware_reboot": False}
    proc = fleet.role("nic-role2", "main", extra)
    stats = play_stats(proc, "nic-role2")
    assert stats["failures"] == 0 and stats["changed"] > 0, proc.stdout[-4000:]
    assert fleet.nic("nic-role2") == (OLD, NEW)  # burnt, not running: the rollout's one reboot runs it
    assert '"nic_firmware_reboot_pending": true' in proc.stdout
    again = fleet.role("nic-role2", "main", dict(extra, nic_firmware_reboot=True))
    stats = play_stats(again, "nic-role2")
    assert stats["failures"] == 0, again.stdout[-4000:]
    assert fleet.nic("nic-role2") == (NEW, None)  # the pending firmware made the second run reboot
