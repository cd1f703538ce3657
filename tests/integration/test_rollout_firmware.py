"""playbooks/upgrade.yml with GPU firmware in its components, on 2 simulated HGX H100 nodes over real SSH, real Slurm
and NVIDIA's real nvfwupd (open-nvfwupd) talking to the nodes' simulated BMCs.

The fleet (tests/fixtures/rollout/fleet-hgx.yml, 127.0.43.x, BMCs on 127.0.143.x, slurmctld on 16700): driver
570.124.06 and HGX bundle HGX-22.10-1; the BOM: driver 580.95.05 and a GPU firmware package (HMC, GPU VBIOS and a
CPLD, which only an AC power cycle activates). Per node the rollout drains, flashes the package, installs the driver,
power-cycles the node once through its BMC (Chassis.Reset PowerCycle: to Slurm an unexpected reboot), verifies,
validates and resumes it. Slurm's node states are sampled during the run (rollout_helpers.Sampler).
Then what slurmctld itself (Debian's 22.05) does with a power-cycled node, ReturnToService 1 and 2 (the fleet's
slurm.conf changed and `scontrol reconfigure`d by the test, then set back): our drain survives (RTS=1: DOWN+DRAIN, our
reason; RTS=2: IDLE+DRAIN, our reason) and slurm_node resumes it; a node resumed before Slurm registered its new boot,
or one in service, ends DOWN "Node unexpectedly rebooted" (RTS=1), which slurm_node never resumes.
Needs root, the simulator's packages and the open-nvfwupd venv (tests/gpusim/install-deps.sh,
`python -m gpusim.opennvfwupd install`). Run:
    .venv/bin/python -m pytest tests/integration/test_rollout_firmware.py -m integration -q
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import ssl
import time
import urllib.request

import pytest
from fleet import ANSIBLE, TESTS, ansible_env, fleet_up, needs_fleet, run
from gpusim import artifacts
from rollout_helpers import NEW, OLD, RolloutFleet, max_unavailable, report_json, unavailable, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-hgx.yml"
BUNDLE_OLD, BUNDLE_NEW = "HGX-22.10-1", "HGX-24.04-2"
VBIOS_NEW = "96.00.AF.00.01"
CPLD_NEW = "0.1D"  # the spec's CPLD runs gpusim's default 0.1C; only an AC power cycle activates a CPLD
MAX_UNAVAILABLE = 1

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, real_nvfwupd):
    from gpusim import opennvfwupd

    base = tmp_path_factory.mktemp("rollout-firmware")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW))
    package = artifacts.write_fwpkg(base / "firmware", BUNDLE_NEW,
                                    components={"HMC": BUNDLE_NEW, "GPU_SXM": VBIOS_NEW, "CPLD": CPLD_NEW})
    # What a rollback would flash back (never, in this happy path): the preflight refuses a rollout whose flash could not
    # be rolled back. The nodes' state files record no firmware version yet, so the package is named outright.
    old_package = artifacts.write_fwpkg(base / "firmware", BUNDLE_OLD)
    old = {"package": str(old_package), "checksum": "sha256:" + artifacts.sha256_file(old_package)}
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        fleet = RolloutFleet(workdir, runfiles)
        fleet.secret = json.loads((workdir / "bmc" / "credentials.json").read_text())["password"]
        fleet.firmware = {
            # The BOM with its GPU firmware package (the spec's BOM cannot name a file the test writes).
            "gpufleet_bom": {"driver": {"version": NEW, "install": "runfile", "kernel_module": "open"},
                             "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 2}, "cuda": ["12.4"],
                             "gpu_firmware": {"package": str(package), "checksum": "sha256:" + artifacts.sha256_file(package),
                                              "version": BUNDLE_NEW}},
            "gpufleet_components": ["gpu_firmware", "nvidia_driver"],
            "gpu_firmware_nvfwupd_path": str(opennvfwupd.SOURCE / "nvfwupd.py"),
            "gpu_firmware_nvfwupd_interpreter": str(opennvfwupd.python()),
            "gpu_firmware_poll_interval": 1, "gpu_firmware_timeout": 120, "gpu_firmware_bmc_reset_wait": 30,
            "gpu_firmware_reboot_timeout": 120,
            "gpu_firmware_packages": {BUNDLE_OLD: old},
            "gpu_firmware_rollback_package": old["package"], "gpu_firmware_rollback_checksum": old["checksum"],
        }
        yield fleet


@pytest.fixture(scope="module")
def rollout(fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("rollout-firmware-run")
    before = {name: fleet.sim(name) for name in fleet.names}
    sampler = fleet.sampler(out / "slurm-states.jsonl")
    done = fleet.upgrade(out / "report", gpufleet_max_unavailable=MAX_UNAVAILABLE, gpufleet_waves=[1],
                         gpufleet_failure_budget=0, **fleet.firmware)
    samples = sampler.stop()
    return {"run": done, "before": before, "samples": samples, "report": out / "report"}


def test_the_rollout_succeeds_without_showing_the_bmc_password(fleet, rollout):
    done = rollout["run"]
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert fleet.secret not in done.stdout + done.stderr  # invariant 7


def test_every_node_runs_the_bom_firmware_and_driver(fleet, rollout):
    for name in fleet.names:
        sim = fleet.sim(name)
        components = sim["gpu_firmware"]["components"]
        assert sim["gpu_firmware"]["version"] == BUNDLE_NEW, (name, sim["gpu_firmware"])
        assert components["HGX_FW_CPLD_0"]["version"] == CPLD_NEW, (name, components["HGX_FW_CPLD_0"])
        assert not any(c["staged"] for c in components.values()), (name, components)  # nothing waits for a reset
        assert {g["vbios"] for g in sim["gpus"]} == {VBIOS_NEW}, name
        assert (fleet.driver(name), sim["fabricmanager"]["version"]) == (NEW, NEW), name


def test_each_node_was_activated_once_by_a_power_cycle(fleet, rollout):
    for name in fleet.names:
        before, after = rollout["before"][name], fleet.sim(name)
        assert after["boot_count"] == before["boot_count"] + 1, (name, before["boot_count"], after["boot_count"])
        assert after["boot_id"] != before["boot_id"], name
        activate = fleet.phase(name, "activate")
        assert activate and (activate["status"], activate.get("detail")) == ("ok", "power_cycle"), (name, activate)
        validate = fleet.phase(name, "validate")
        assert validate and validate["status"] == "ok", (name, validate)


def test_every_node_is_back_in_service_and_upgraded(fleet, rollout):
    for name in fleet.names:
        node = fleet.node(name)
        assert not unavailable(node["state"]), (name, node)
        section = fleet.rollout_section(name)
        assert (section["status"], section["result"]) == ("done", "upgraded"), (name, section)
    report = report_json(rollout["report"])
    assert report, report


def test_never_more_unavailable_than_the_budget(fleet, rollout):
    samples = rollout["samples"]
    assert samples, "the sampler saw nothing"
    worst, when, nodes = max_unavailable(samples, fleet.names)
    assert worst <= MAX_UNAVAILABLE, (worst, when, nodes)
    # The power cycle was seen by Slurm: each node was out of service at some point of the run.
    assert {s["node"] for s in samples if unavailable(s["state"])} == set(fleet.names)


# --- what Slurm itself does with a node that an AC power cycle rebooted ------------------------------------
# Not the simulator's behaviour: slurmctld's (the real one, Debian's). The node's slurmd comes back with a new
# BootTime that Slurm did not ask for (no `scontrol reboot`). The rollout relies on what these tests show: with either
# ReturnToService, our drain (the DRAIN flag and our reason, set by us) survives the power cycle, so slurm_node resumes
# it as ours; an unexpected reboot of a node nobody drained is Slurm's "Node unexpectedly rebooted" (RTS=1), never ours.

def set_return_to_service(fleet, value: int) -> None:
    conf = fleet.workdir / "slurm" / "etc" / "slurm.conf"
    text = conf.read_text()
    conf.write_text(re.sub(r"(?m)^ReturnToService=\d+$", f"ReturnToService={value}", text))
    fleet.scontrol("reconfigure")
    deadline = time.monotonic() + 30
    while f"ReturnToService         = {value}" not in fleet.scontrol("show", "config"):
        assert time.monotonic() < deadline, "slurmctld did not take the new ReturnToService"
        time.sleep(0.5)


def redfish_reset(fleet, name: str, reset: str) -> None:
    """ComputerSystem.Reset on the node's BMC (what gpu_firmware's activate entry sends, PowerCycle, or its parts)."""
    host = fleet.record["nodes"][fleet.names.index(name)]["bmc_address"]
    creds = json.loads((fleet.workdir / "bmc" / "credentials.json").read_text())
    request = urllib.request.Request(f"https://{host}/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset", method="POST",
                                     data=json.dumps({"ResetType": reset}).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Basic " + base64.b64encode(
                                         f"{creds['user']}:{creds['password']}".encode()).decode()})
    context = ssl.create_default_context(cafile=str(fleet.workdir / "bmc" / "cert.pem"))
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:  # noqa: S310 - https only
        assert answer.status == 204, answer.status


def power_cycle(fleet, name: str, off_s: float = 6) -> None:
    """An AC power cycle with the power off for off_s seconds (a real one takes minutes: slurmd's last message then is
    well before the new boot, which is how Slurm tells an unexpected reboot; with the simulator's 1 s reboot a
    PowerCycle can come back within Slurm's one-second BootTime resolution of the last message and go unnoticed)."""
    redfish_reset(fleet, name, "ForceOff")
    wait_power(fleet, name, "down")
    time.sleep(off_s)
    redfish_reset(fleet, name, "On")


def wait_power(fleet, name: str, wanted: str) -> None:
    from gpusim import node as gnode

    deadline = time.monotonic() + 60
    while gnode.power(fleet.node_dir(name)) != wanted:
        assert time.monotonic() < deadline, f"{name} is not {wanted}: {gnode.power(fleet.node_dir(name))}"
        time.sleep(0.2)


def resume_by_hand(fleet, name: str) -> None:
    """What a person does after the probe (refused by Slurm on a node in service: ignored)."""
    run(["scontrol", "update", f"nodename={name}", "state=resume"], env=fleet.slurm_env, timeout=30)


def boot_time(fleet, name: str) -> str:
    return re.search(r" BootTime=(\S+)", fleet.scontrol("show", "node", "-o", name)).group(1)


@contextlib.contextmanager
def return_to_service(fleet, value: int, name: str):
    """slurmctld with ReturnToService=value for a probe of ``name``; then the fleet's 2 again and the node resumed by hand."""
    set_return_to_service(fleet, value)
    try:
        yield
    finally:
        set_return_to_service(fleet, 2)
        resume_by_hand(fleet, name)


def after_power_cycle(fleet, name: str) -> dict[str, str]:
    """Power-cycle the node; Slurm's view of it once its slurmd registered the new boot (and settled)."""
    boots, booted = fleet.sim(name)["boot_count"], boot_time(fleet, name)
    power_cycle(fleet, name)
    deadline = time.monotonic() + 120
    while fleet.sim(name)["boot_count"] == boots or boot_time(fleet, name) == booted or fleet.node(name)["state"].endswith("*"):
        assert time.monotonic() < deadline, ("the node did not come back from its power cycle", fleet.sim(name)["boot_count"], fleet.node(name))
        time.sleep(0.5)
    time.sleep(3)  # what slurmctld does right after the registration has been done
    line = fleet.scontrol("show", "node", "-o", name)
    node = fleet.node(name)
    node["reason_user"] = (re.search(r" Reason=.*\[(\S+?)@", line) or re.search(r"()", "")).group(1)
    return node


def resume_as_rollout(fleet, name: str, rollout_id: str) -> dict:
    """slurm_node state=resumed rollout_id=... from the Slurm client, as the rollout's resume step runs it."""
    env = ansible_env(json_output=True, SLURM_CONF=str(fleet.workdir / "slurm" / "etc" / "slurm.conf"))
    proc = run([str(ANSIBLE), "slurmctl", "-i", str(fleet.inventory), "-m", "gpufleet.lifecycle.slurm_node",
                "-a", json.dumps({"node": name, "state": "resumed", "rollout_id": rollout_id})], env=env, timeout=240)
    return json.loads(proc.stdout[proc.stdout.index("{"):])["plays"][0]["tasks"][0]["hosts"]["slurmctl"]


@pytest.mark.parametrize("rts", [1, 2])
def test_a_drain_of_ours_survives_an_ac_power_cycle_and_is_resumed(fleet, rts):
    name = fleet.names[0]
    with return_to_service(fleet, rts, name):
        ours = f"gpufleet:r-probe{rts}: power cycle"
        fleet.scontrol("update", f"nodename={name}", "state=drain", f"reason={ours}")
        node = after_power_cycle(fleet, name)
        print(f"ReturnToService={rts}, drained by us, after an AC power cycle: {node}")
        assert "DRAIN" in node["state"] and node["reason"].startswith(ours + " ["), node
        resumed = resume_as_rollout(fleet, name, f"r-probe{rts}")
        assert resumed["changed"] is True and resumed["drained_by_others"] is False, resumed
        # Right after a resume Slurm may show the node NOT_RESPONDING until its next ping answers (about a second).
        deadline = time.monotonic() + 60
        while unavailable(fleet.node(name)["state"]):
            assert time.monotonic() < deadline, fleet.node(name)
            time.sleep(0.5)


def test_a_resume_before_slurm_registered_the_new_boot_is_undone_by_it(fleet):
    # Why the rollout waits for Slurm's new BootTime after its power cycle: resumed before slurmd registers the new
    # boot, the node is DOWN again at that registration, with Slurm's reason, which is not ours (ReturnToService=1).
    name = fleet.names[-1]
    with return_to_service(fleet, 1, name):
        fleet.scontrol("update", f"nodename={name}", "state=drain", "reason=gpufleet:r-probe: power cycle")
        boots, booted = fleet.sim(name)["boot_count"], boot_time(fleet, name)
        redfish_reset(fleet, name, "ForceOff")
        wait_power(fleet, name, "down")
        fleet.scontrol("update", f"nodename={name}", "state=resume")  # too early: before the node's new boot
        time.sleep(6)
        redfish_reset(fleet, name, "On")
        deadline = time.monotonic() + 120
        while fleet.sim(name)["boot_count"] == boots or boot_time(fleet, name) == booted:
            assert time.monotonic() < deadline, "the node did not come back from its power cycle"
            time.sleep(0.5)
        time.sleep(3)
        node = fleet.node(name)
        print(f"ReturnToService=1, resumed before the new boot registered: {node}")
        assert node["state"].startswith("DOWN") and node["reason"].startswith("Node unexpectedly rebooted"), node
        resumed = resume_as_rollout(fleet, name, "r-probe")
        assert resumed["changed"] is False and resumed["drained_by_others"] is True, resumed  # never ours (invariant 3)


def test_an_unexpected_reboot_of_a_node_in_service_is_not_ours(fleet):
    name = fleet.names[-1]
    with return_to_service(fleet, 1, name):
        node = after_power_cycle(fleet, name)
        print(f"ReturnToService=1, in service, after an AC power cycle: {node}")
        assert node["state"].startswith("DOWN") and node["reason"].startswith("Node unexpectedly rebooted"), node
        resumed = resume_as_rollout(fleet, name, "r-probe")
        assert resumed["changed"] is False and resumed["drained_by_others"] is True, resumed
        assert fleet.node(name)["state"].startswith("DOWN"), fleet.node(name)
