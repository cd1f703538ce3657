"""The component roles composed as the rollout composes them, on simulated nodes over real SSH (gpusim).

The fleet (written below: nodes on 127.0.31.x, BMCs on 127.0.131.x, slurmctld on 19100) holds HGX H100 nodes with
one ConnectX-7 each; NVIDIA's real nvfwupd (open-nvfwupd) talks to their simulated BMCs.

- `plan` of nvidia_driver, gpu_firmware and nic_firmware changes nothing and says, per component, whether the BOM
  changes it and what activating that needs: nothing on cmp-bom (at the BOM), everything on cmp-old.
- With `<role>_activate: false` the three roles install, flash and burn and only say what waits
  (`<role>_activation_pending`); `verify` run before the activation fails naming what does not run yet; one reboot
  (the strongest kind pending) activates everything and `verify` of each role passes; the node rebooted once.
- A GPU fallen off the bus (Xid 79, injected with `gpusim fault`): the driver cannot unload, so the role's rollback
  reboots first (it reads the Xid in the kernel log), then restores the last known good driver and verifies it.
- Long steps run async: two nodes' NIC burns (each takes `timing.flash` seconds on the node) overlap in time with
  `-f 1`, read from the nodes' own state files (the time the module recorded the last known good before burning,
  and the time of the history entry it wrote after).

Each node keeps its node state file under /var/lib/gpusim (its own folder). Needs root, the simulator's packages and
the open-nvfwupd venv (tests/gpusim/install-deps.sh, `python -m gpusim.opennvfwupd install`). Run:
    .venv/bin/python -m pytest tests/integration/test_roles_compose.py -m integration -q
"""

from __future__ import annotations

import datetime
import json
import pathlib

import pytest
from fleet import Fleet as BaseFleet
from fleet import fleet_up, gpusim, json_doc, needs_fleet
from gpusim import artifacts
from gpusim import state as gstate

pytestmark = needs_fleet()

OLD, NEW = "550.90.07", "570.124.06"
CX7 = "MT_0000000834"
NIC_OLD, NIC_NEW = "28.40.1000", "28.43.1014"
VBIOS_OLD, VBIOS_NEW = "96.00.A5.00.01", "96.00.AF.00.01"
BUNDLE_OLD, BUNDLE_NEW = "HGX-22.10-1", "HGX-24.04-2"
STATE_FILE = "/var/lib/gpusim/gpufleet.fact"  # inside the node's own folder

SPEC = f"""
fleet:
  name: compose-5
  loopback: 31
  bmc_loopback: 131
  ssh_port: 22
  slurm_port: 19100
timing: {{reboot: 1, flash: 4, bmc_reset: 1, diag: 0.2, burn: 0.2, nccl: 0.2}}
skus:
  hgx_h100:
    gpu_model: NVIDIA H100 80GB HBM3
    gpu_count: 2
    nvswitch: true
    cpus: 2
    gpu_firmware: {BUNDLE_OLD}
    nics:
      - {{type: ConnectX-7, psid: {CX7}, part_number: MCX755106AS-HEA_Ax, fw: {NIC_OLD}, count: 1}}
nodes:
  - {{names: [cmp-bom], sku: hgx_h100, driver: {NEW}, kernel_module: open, nic_fw: {{0: {NIC_NEW}}}, vbios: {VBIOS_NEW},
     gpu_firmware: {BUNDLE_NEW}}}
  - {{names: [cmp-old], sku: hgx_h100, driver: {OLD}, kernel_module: open, faults: [nic_no_live_reset]}}
  - {{names: [cmp-xid], sku: hgx_h100, driver: {OLD}, kernel_module: open}}
  - {{names: [cmp-a1, cmp-a2], sku: hgx_h100, driver: {OLD}, kernel_module: open}}
"""

# The rollout's steps, one play: each step is ROLE:ENTRY, or "reboot" (the one activation).
PLAYBOOK = """
- name: The component roles, composed
  hosts: "{{ targets }}"
  gather_facts: false
  tasks:
    - name: Run the steps
      ansible.builtin.include_tasks: step.yml
      loop: "{{ steps }}"
      loop_control:
        loop_var: step

    - name: Show the contract facts
      ansible.builtin.debug:
        msg: "{{ dict(facts | zip(query('ansible.builtin.vars', *facts, default='(undefined)'))) }}"
"""
STEP = """
- name: Run {{ step }}
  ansible.builtin.include_role:
    name: "gpufleet.lifecycle.{{ step.split(':')[0] }}"
    tasks_from: "{{ step.split(':')[1] }}"
  when: step != 'reboot'

- name: Activate once
  ansible.builtin.reboot:
    reboot_timeout: 120
  when: step == 'reboot'
"""
COMPONENTS = ("nvidia_driver", "gpu_firmware", "nic_firmware")
FACTS = [f"{c}_{suffix}" for c in COMPONENTS for suffix in ("needs_change", "activation", "before", "activation_pending")]


class Fleet(BaseFleet):
    def __init__(self, workdir: pathlib.Path, extra: dict, secret: str):
        super().__init__(workdir)
        self.extra = extra
        self.secret = secret
        self.playbook = workdir / "compose.yml"
        self.playbook.write_text(PLAYBOOK)
        (workdir / "step.yml").write_text(STEP)

    def play(self, targets: str, steps: list[str], *args: str, **extra) -> tuple[int, dict]:
        variables = {"targets": targets, "steps": steps, "facts": FACTS, **self.extra, **extra}
        proc = self.ansible_playbook(self.playbook, "-e", json.dumps(variables), *args, json_output=True, timeout=600)
        assert self.secret not in proc.stdout + proc.stderr  # the BMC password never shows (invariant 7)
        return proc.returncode, json_doc(proc)

    def sim(self, name: str) -> dict:
        return gstate.load(self.node_dir(name))

    def fact(self, name: str) -> dict:
        path = self.node_dir(name) / "gpufleet.fact"
        return json.loads(path.read_text()) if path.exists() else {}


def results(doc: dict, name: str, host: str) -> list[dict]:
    """Every result of the tasks called NAME (role prefix dropped) for HOST, in order."""
    found = []
    for task in doc["plays"][0]["tasks"]:
        if task["task"]["name"].split(" : ", 1)[-1] == name and host in task["hosts"]:
            found.append(task["hosts"][host])
    return found


def installer(doc: dict, host: str) -> dict:
    """The result of the last driver installer run (async job or in place), as the role keeps it."""
    return results(doc, "Keep the installer's result", host)[-1]["ansible_facts"]["__nvidia_driver_result"]


def contract(doc: dict, host: str) -> dict:
    [shown] = results(doc, "Show the contract facts", host)
    return shown["msg"]


def failure(doc: dict, host: str) -> tuple[str, str]:
    for task in doc["plays"][0]["tasks"]:
        result = task["hosts"].get(host, {})
        if result.get("failed"):
            return task["task"]["name"].split(" : ", 1)[-1], result.get("msg", "")
    return "", ""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, real_nvfwupd):
    from gpusim import opennvfwupd

    base = tmp_path_factory.mktemp("gpusim-compose")
    (base / "spec.yml").write_text(SPEC)
    art = base / "artifacts"
    runfiles = {}
    for version in (OLD, NEW):
        path = artifacts.write_driver_runfile(art, version)
        runfiles[version] = {"source": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    images = {}
    for version in (NIC_OLD, NIC_NEW):
        path = artifacts.write_mlx_image(art, CX7, version)
        images[version] = {"path": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    package = artifacts.write_fwpkg(art, BUNDLE_NEW, components={"HMC": BUNDLE_NEW, "GPU_SXM": VBIOS_NEW})
    with fleet_up(base / "spec.yml", base / "fleet") as workdir:
        secret = json.loads((workdir / "bmc" / "credentials.json").read_text())["password"]
        extra = {
            "nvidia_driver_version": NEW, "nvidia_driver_runfiles": runfiles, "nvidia_driver_hold_kernel": False,
            "nvidia_driver_state_file": STATE_FILE, "nvidia_driver_reboot_timeout": 120,
            "gpu_firmware_package": str(package), "gpu_firmware_checksum": "sha256:" + artifacts.sha256_file(package),
            "gpu_firmware_nvfwupd_path": str(opennvfwupd.SOURCE / "nvfwupd.py"),
            "gpu_firmware_nvfwupd_interpreter": str(opennvfwupd.python()),
            "gpu_firmware_poll_interval": 1, "gpu_firmware_timeout": 120, "gpu_firmware_bmc_reset_wait": 30,
            "gpu_firmware_state_file": STATE_FILE,
            "nic_firmware_versions": {CX7: NIC_NEW}, "nic_firmware_images": {CX7: images}, "nic_firmware_state_file": STATE_FILE,
            "nic_firmware_reset": "mlxfwreset",
        }
        yield Fleet(workdir, extra, secret)


# --- plan ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def planned(fleet):
    before = {name: fleet.sim(name) for name in ("cmp-bom", "cmp-old")}
    rc, doc = fleet.play("cmp-bom,cmp-old", [f"{c}:plan" for c in COMPONENTS])
    assert rc == 0, [failure(doc, host) for host in ("cmp-bom", "cmp-old")]
    return before, doc


def test_plan_of_a_node_at_the_bom_needs_nothing(planned):
    _before, doc = planned
    facts = contract(doc, "cmp-bom")
    assert {c: (facts[f"{c}_needs_change"], facts[f"{c}_activation"]) for c in COMPONENTS} == {c: (False, "none") for c in COMPONENTS}
    assert (facts["nvidia_driver_before"]["driver"], facts["nvidia_driver_before"]["fabricmanager"]) == (NEW, NEW)
    assert facts["gpu_firmware_before"]["bundle"] == BUNDLE_NEW
    assert facts["nic_firmware_before"] == {CX7: NIC_NEW}


def test_plan_of_an_old_node_says_what_each_component_needs(planned):
    _before, doc = planned
    facts = contract(doc, "cmp-old")
    assert {c: (facts[f"{c}_needs_change"], facts[f"{c}_activation"]) for c in COMPONENTS} == {
        "nvidia_driver": (True, "none"),  # the module reloads the modules in place
        "gpu_firmware": (True, "gpu_reset"),  # GPU firmware activates on a GPU reset (the HMC's reset is the role's)
        "nic_firmware": (True, "reboot"),  # no live reset on this NIC (nic_no_live_reset)
    }
    assert (facts["nvidia_driver_before"]["driver"], facts["nvidia_driver_before"]["fabricmanager"]) == (OLD, OLD)
    assert facts["gpu_firmware_before"]["bundle"] is None  # not at the package, and no last known good recorded yet
    assert set(facts["gpu_firmware_before"]["components"].values()) == {VBIOS_OLD, BUNDLE_OLD}
    assert facts["nic_firmware_before"] == {CX7: NIC_OLD}


def test_plan_changes_nothing(fleet, planned):
    before, doc = planned
    for host in ("cmp-bom", "cmp-old"):
        assert doc["stats"][host]["changed"] == 0, doc["stats"]
        after = fleet.sim(host)
        for key in ("driver", "fabricmanager", "gpus", "nics", "boot_count", "boot_id"):
            assert after[key] == before[host][key], (host, key)
        assert fleet.fact(host).get("history", []) == []


# --- deferred activation: install everything, activate once, verify ------------------------------------

@pytest.fixture(scope="module")
def deferred(fleet, planned):
    boot_count = fleet.sim("cmp-old")["boot_count"]
    deferred = {f"{c}_activate": False for c in COMPONENTS}
    rc, installed = fleet.play("cmp-old", ["nic_firmware:main", "gpu_firmware:main", "nvidia_driver:main"], **deferred)
    assert rc == 0, failure(installed, "cmp-old")
    after_install = fleet.sim("cmp-old")
    early_rc, early = fleet.play("cmp-old", ["nic_firmware:verify"])
    rc, activated = fleet.play("cmp-old", ["nic_firmware:main", "gpu_firmware:main", "nvidia_driver:main", "reboot",
                                           "nic_firmware:verify", "gpu_firmware:verify", "nvidia_driver:verify"], **deferred)
    return {"boot_count": boot_count, "installed": installed, "after_install": after_install, "early": (early_rc, early),
            "activated": (rc, activated)}


def test_deferred_roles_install_and_only_say_what_waits(deferred):
    facts = contract(deferred["installed"], "cmp-old")
    assert {c: facts[f"{c}_activation_pending"] for c in COMPONENTS} == {
        "nic_firmware": "reboot", "gpu_firmware": "gpu_reset", "nvidia_driver": "none",
    }
    assert results(deferred["installed"], "Reboot to run the new NIC firmware", "cmp-old")[0].get("skipped")
    assert not results(deferred["installed"], "Reset the GPUs", "cmp-old") or all(
        r.get("skipped") for r in results(deferred["installed"], "Reset the GPUs", "cmp-old"))
    sim = deferred["after_install"]
    assert sim["boot_count"] == deferred["boot_count"]  # nothing rebooted
    assert (sim["nics"][0]["fw"], sim["nics"][0].get("staged_fw")) == (NIC_OLD, NIC_NEW)  # burnt, not running
    assert {g["vbios"] for g in sim["gpus"]} == {VBIOS_OLD}  # flashed (staged), not running
    assert sim["driver"]["version"] == NEW  # reloaded in place by the module: its own activation


def test_verify_before_the_activation_fails_naming_what_does_not_run(deferred):
    rc, doc = deferred["early"]
    assert rc != 0
    name, msg = failure(doc, "cmp-old")
    assert name == "Check that every NIC runs its firmware", (name, msg)
    assert "waiting for a reboot" in msg and NIC_NEW in msg


def test_one_reboot_activates_everything_and_every_verify_passes(fleet, deferred):
    rc, doc = deferred["activated"]
    assert rc == 0, failure(doc, "cmp-old")
    facts = contract(doc, "cmp-old")
    assert {c: facts[f"{c}_activation_pending"] for c in COMPONENTS} == {c: "none" for c in COMPONENTS}
    for name in ("Check that every NIC runs its firmware", "Check that every component runs the package's firmware",
                 "Check that the driver answers with the expected version", "Check that the fabric manager matches the driver on NVSwitch systems"):
        checks = results(doc, name, "cmp-old")
        assert checks and not checks[-1].get("failed") and not checks[-1].get("skipped"), (name, checks)
    sim = fleet.sim("cmp-old")
    assert sim["boot_count"] == deferred["boot_count"] + 1  # exactly one activation
    assert (sim["nics"][0]["fw"], {g["vbios"] for g in sim["gpus"]}, sim["driver"]["version"]) == (NIC_NEW, {VBIOS_NEW}, NEW)


# --- rollback with a GPU fallen off the bus -------------------------------------------------------------

@pytest.fixture(scope="module")
def xid_rollback(fleet):
    rc, doc = fleet.play("cmp-xid", ["nvidia_driver:main"])
    assert rc == 0, failure(doc, "cmp-xid")
    assert fleet.fact("cmp-xid")["last_known_good"]["driver"]["version"] == OLD
    fault = gpusim("fault", "cmp-xid", "xid79", "gpu=1", workdir=fleet.workdir)
    assert fault.returncode == 0, fault.stdout + fault.stderr
    boot_count = fleet.sim("cmp-xid")["boot_count"]
    rc, doc = fleet.play("cmp-xid", ["nvidia_driver:rollback"])
    return {"boot_count": boot_count, "rollback": (rc, doc)}


def test_rollback_reboots_first_then_restores_and_verifies(fleet, xid_rollback):
    rc, doc = xid_rollback["rollback"]
    assert rc == 0, failure(doc, "cmp-xid")
    [reboot] = results(doc, "Reboot to load the new kernel modules", "cmp-xid")
    assert reboot.get("rebooted") is True
    restore = installer(doc, "cmp-xid")
    assert restore["plan"]["driver"]["after"] == OLD
    assert restore["changed"] and restore["before"]["driver"]["nvidia_smi"] == "ok" and not restore["reboot_required"]
    [check] = results(doc, "Check that the driver answers with the expected version", "cmp-xid")
    assert not check.get("failed") and not check.get("skipped")
    sim = fleet.sim("cmp-xid")
    assert sim["boot_count"] == xid_rollback["boot_count"] + 1  # one reboot: before the rollback, none after
    assert sim["driver"]["version"] == OLD and not any(g["fell_off"] for g in sim["gpus"])


# --- async: a wave larger than forks is not serialised ------------------------------------------------------

def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def test_two_nodes_burn_at_once_on_one_fork(fleet):
    rc, doc = fleet.play("cmp-a1,cmp-a2", ["nic_firmware:main"], "-f", "1")
    assert rc == 0, [failure(doc, host) for host in ("cmp-a1", "cmp-a2")]
    spans = {}
    for host in ("cmp-a1", "cmp-a2"):
        state = fleet.fact(host)
        start = _epoch(state["last_known_good"]["nic_firmware"]["recorded_at"])  # recorded just before the burn
        end = _epoch([h for h in state["history"] if h["component"] == "nic_firmware"][-1]["time"])  # after burn and reset
        assert end - start >= 4, (host, start, end)  # timing.flash: the burn takes 4 s on the node
        spans[host] = (start, end)
        assert fleet.sim(host)["nics"][0]["fw"] == NIC_NEW
    (_start1, end1), (start2, _end2) = sorted(spans.values())
    assert start2 < end1, spans  # the second node's burn started before the first one's ended: one fork, both at once
