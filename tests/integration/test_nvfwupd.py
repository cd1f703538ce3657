"""gpufleet.lifecycle.nvfwupd end to end: NVIDIA's real nvfwupd (open-nvfwupd, through its venv python) on the
controller against the simulated BMCs of a 2-node fleet (tests/fixtures/firmware/fleet-nvfwupd.yml: nodes on
127.0.70.x, BMCs on 127.0.170.x:443), the result recorded on the node with state=record.

Checks: check-mode plan, update, idempotent re-run (staged firmware is not flashed again), activation,
a downgrade refused then allowed with ForceUpdate off again afterwards (also after a failed flash), a flash
failing midway naming the finished and unfinished components (recorded on the node), a wrong BMC password,
a BMC that does not answer, a checksum mismatch flashing nothing, the password absent from every output
(-vvv included) and no plain-HTTP request (nvfwupd's fallback) leaving the controller. Run:
    .venv/bin/python -m pytest tests/integration/test_nvfwupd.py -m integration -q
"""

from __future__ import annotations

import base64
import glob
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest
from fleet import ANSIBLE_PLAYBOOK, TESTS, ansible_env, fleet_up, gpusim, json_doc, needs_fleet, run
from fleet import Fleet as BaseFleet
from gpusim import artifacts, opennvfwupd

SPEC = TESTS / "fixtures" / "firmware" / "fleet-nvfwupd.yml"
NEW_VBIOS, OLD_VBIOS, OLDER_VBIOS = "96.00.AF.00.01", "96.00.A5.00.01", "96.00.99.00.01"
WRONG = "not-the-password"
NO_BMC = "127.0.170.99"  # no BMC there: HTTPS is refused, and this test listens on port 80

pytestmark = needs_fleet()

PLAY = """
- name: nvfwupd from the controller, recorded on the node
  hosts: "{{ target }}"
  gather_facts: false
  tasks:
    - name: Flash
      block:
        - name: Run nvfwupd
          gpufleet.lifecycle.nvfwupd:
            bmc:
              address: "{{ bmc_at | default(bmc_address) }}"
              user: "{{ bmc_user }}"
              password: "{{ bmc_pw | default(bmc_password) }}"
              port: "{{ bmc_port }}"
              validate_certs: "{{ bmc_validate_certs | default(true) }}"
              ca_path: "{{ gpufleet_bmc_ca_path }}"
            package: "{{ package }}"
            checksum: "{{ checksum }}"
            allow_downgrade: "{{ allow_downgrade | default(false) }}"
            targets: "{{ fw_targets | default([]) }}"
            timeout: "{{ fw_timeout | default(120) }}"
            poll_interval: 1
            nvfwupd_path: "{{ nvfwupd_path }}"
            nvfwupd_interpreter: "{{ nvfwupd_interpreter }}"
          delegate_to: localhost
          register: fw
      always:
        - name: Record it on the node
          gpufleet.lifecycle.nvfwupd:
            state: record
            record: "{{ fw.state_record }}"
          when: fw.state_record is defined
"""


class Fleet(BaseFleet):
    def __init__(self, workdir, playbook):
        super().__init__(workdir)
        creds = json.loads((workdir / "bmc" / "credentials.json").read_text())
        self.user, self.password = creds["user"], creds["password"]
        self.bmc = {r["name"]: r["bmc_address"] for r in self.record["nodes"]}
        self.playbook = playbook
        self.ctx = ssl._create_unverified_context()  # noqa: S323 - the fleet's self-signed certificate

    def flash(self, target, package, *args, check=False, verbose=False, **extra):
        evars = {
            "target": target,
            "package": str(package),
            "checksum": "sha256:" + artifacts.sha256_file(package),
            "nvfwupd_path": str(opennvfwupd.SOURCE / "nvfwupd.py"),
            "nvfwupd_interpreter": str(opennvfwupd.python()),
            **extra,
        }
        cmd = ["-e", json.dumps(evars), *(["--check", "--diff"] if check else []), *args]
        if verbose:
            return self.ansible_playbook(self.playbook, "-vvv", *cmd, env=ansible_env())
        doc = json_doc(self.ansible_playbook(self.playbook, *cmd, json_output=True))
        tasks = doc["plays"][0]["tasks"]
        return {t["task"]["name"]: t["hosts"][target] for t in tasks}

    def redfish(self, name, method, path, body=None):
        req = urllib.request.Request(f"https://{self.bmc[name]}{path}", method=method, data=json.dumps(body).encode() if body else None)
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode())
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:  # noqa: S310 - https only
            data = resp.read()
            return resp.status, json.loads(data) if data else None

    def force_update(self, name):
        return self.redfish(name, "GET", "/redfish/v1/UpdateService")[1]["HttpPushUriOptions"]["ForceUpdate"]

    def vbios(self, name):
        out = self.ssh_ok(name, "nvidia-smi --query-gpu=vbios_version --format=csv,noheader")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def state(self, name):
        return json.loads(self.ssh_ok(name, "cat /etc/ansible/facts.d/gpufleet.fact"))

    def boot_id(self, name):
        return self.ssh_ok(name, "cat /proc/sys/kernel/random/boot_id").strip()

    def reboot(self, name):
        boot_id = self.boot_id(name)
        self.redfish(name, "POST", "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset", {"ResetType": "ForceRestart"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            proc = self.ssh(name, "cat /proc/sys/kernel/random/boot_id", timeout=10)
            if proc.returncode == 0 and proc.stdout.strip() not in ("", boot_id):
                return
            time.sleep(0.5)
        pytest.fail(f"{name} did not come back")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, real_nvfwupd):
    base = tmp_path_factory.mktemp("gpusim-nvfwupd")
    playbook = base / "flash.yml"
    playbook.write_text(PLAY)
    with fleet_up(SPEC, base / "fleet") as workdir:
        yield Fleet(workdir, playbook)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    art = tmp_path_factory.mktemp("fwpkg")
    new = artifacts.write_fwpkg(art, "HGX-24.04-2", components={"HMC": "HGX-24.04-2", "GPU_SXM": NEW_VBIOS})
    old = artifacts.write_fwpkg(art, "HGX-22.09-1", components={"GPU_SXM": OLDER_VBIOS})
    return new, old


@pytest.fixture(scope="module", autouse=True)
def private_tmp(tmp_path_factory):
    """This file's own TMPDIR for the module (it runs on the controller): its private folders are looked for there, not in
    /tmp, where another test's nvfwupd run (test_roles_compose, run at the same time by pytest-xdist) keeps its own."""
    folder = tmp_path_factory.mktemp("nvfwupd-tmp")
    # Ansible's remote tmp too: the module keeps its private folder in its Ansible tmp dir (AnsibleModule.tmpdir).
    saved = {name: os.environ.get(name) for name in ("TMPDIR", "ANSIBLE_REMOTE_TMP")}
    os.environ["TMPDIR"] = str(folder)
    os.environ["ANSIBLE_REMOTE_TMP"] = str(folder / "remote")
    yield folder
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _private_folders():
    return glob.glob(os.path.join(os.environ["TMPDIR"], "gpufleet-nvfwupd-*")) + glob.glob(
        os.path.join(os.environ["ANSIBLE_REMOTE_TMP"], "ansible-*tmp-*", "gpufleet-nvfwupd-*")
    )


def test_check_mode_is_the_plan_and_flashes_nothing(fleet, packages):
    new, _old = packages
    result = fleet.flash("fw-01", new, check=True)["Run nvfwupd"]
    assert result["changed"] is True and not result.get("failed"), result
    gpus = [r for r in result["plan"] if r["component"].startswith("HGX_FW_GPU_SXM_")]
    assert len(gpus) == 8 and {(r["installed"], r["package"], r["action"], r["activation"]) for r in gpus} == {(OLD_VBIOS, NEW_VBIOS, "update", "gpu_reset")}
    hmc = next(r for r in result["plan"] if r["component"] == "HGX_FW_BMC_0")
    assert (hmc["installed"], hmc["package"], hmc["activation"]) == ("HGX-22.10-1", "HGX-24.04-2", "bmc_reset")
    assert result["activation_required"] == ["gpu_reset", "bmc_reset"]
    assert "HGX_FW_CPLD_0" not in {r["component"] for r in result["plan"]}  # not in the package
    again = fleet.flash("fw-01", new)["Run nvfwupd"]  # nothing was staged by check mode: the real run flashes
    assert again["changed"] is True and again["task_ids"], again
    assert fleet.state("fw-01")["last_known_good"]["gpu_firmware"]["version"] == "HGX-24.04-2"


def test_rerun_is_idempotent_and_activation_shows_the_new_firmware(fleet, packages):
    new, _old = packages
    assert fleet.vbios("fw-01") == [OLD_VBIOS] * 8  # staged only
    result = fleet.flash("fw-01", new)["Run nvfwupd"]
    assert result["changed"] is False and result["task_ids"] == [], result
    assert {r["action"] for r in result["plan"]} == {"activate"}
    check = fleet.flash("fw-01", new, check=True)["Run nvfwupd"]
    assert check["changed"] is False
    fleet.reboot("fw-01")
    assert fleet.vbios("fw-01") == [NEW_VBIOS] * 8
    after = fleet.flash("fw-01", new)["Run nvfwupd"]
    assert after["changed"] is False and after["activation_required"] == ["bmc_reset"]  # the HMC waits for its own reset


def test_downgrade_refused_then_allowed_with_force_update_off_afterwards(fleet, packages):
    _new, old = packages
    refused = fleet.flash("fw-01", old)["Run nvfwupd"]
    assert refused["failed"] and "would downgrade HGX_FW_GPU_SXM_1 (96.00.AF.00.01 -> 96.00.99.00.01)" in refused["msg"]
    assert fleet.force_update("fw-01") is False
    allowed = fleet.flash("fw-01", old, allow_downgrade=True)["Run nvfwupd"]
    assert allowed["changed"] is True and not allowed.get("failed"), allowed
    assert allowed["force_update"] == {"enabled": True, "disabled_after": True, "found_on": False, "stale_record": False, "turned_off": None}
    assert fleet.force_update("fw-01") is False  # seen on the BMC itself
    assert set(allowed["staged"].values()) == {OLDER_VBIOS}
    history = fleet.state("fw-01")["history"]
    assert [h["action"] for h in history if h["component"] == "gpu_firmware"][-1] == "downgrade"


def test_targets_limit_the_update_to_those_components(fleet, packages):
    new, _old = packages
    result = fleet.flash("fw-02", new, fw_targets=["HGX_FW_GPU_SXM_1"])["Run nvfwupd"]
    assert result["changed"] is True and [r["component"] for r in result["plan"]] == ["HGX_FW_GPU_SXM_1"], result
    assert result["staged"] == {"HGX_FW_GPU_SXM_1": NEW_VBIOS}
    plan = {r["component"]: r["action"] for r in fleet.flash("fw-02", new, check=True)["Run nvfwupd"]["plan"]}
    assert plan["HGX_FW_GPU_SXM_1"] == "activate" and plan["HGX_FW_GPU_SXM_2"] == "update" and plan["HGX_FW_BMC_0"] == "update"
    refused = fleet.flash("fw-02", new, fw_targets=["HGX_FW_CPLD_0"])["Run nvfwupd"]
    assert refused["failed"] and "HGX_FW_CPLD_0 are not components that the package updates" in refused["msg"]


def test_flash_failing_midway_names_the_components_and_leaves_force_update_off(fleet, packages):
    new, old = packages
    assert fleet.flash("fw-02", new)["Run nvfwupd"]["changed"] is True
    assert gpusim("fault", "fw-02", "flash_fail", "percent=50", workdir=fleet.workdir).returncode == 0
    try:
        failed = fleet.flash("fw-02", old, allow_downgrade=True)
    finally:
        gpusim("clear-faults", "fw-02", "flash_fail", workdir=fleet.workdir)
    result = failed["Run nvfwupd"]
    assert result["failed"], result
    assert result["finished"] and result["unfinished"], result
    assert "finished " + ", ".join(result["finished"]) in result["msg"] and "not finished" in result["msg"]
    assert (result["force_update"]["enabled"], result["force_update"]["disabled_after"]) == (True, True)
    assert fleet.force_update("fw-02") is False
    record = fleet.state("fw-02")["history"][-1]
    assert record["component"] == "gpu_firmware" and record["result"] == "partial"
    assert record["details"]["unfinished"] == result["unfinished"]
    assert fleet.state("fw-02")["last_known_good"]["gpu_firmware"]["version"] == "HGX-24.04-2"  # the partial flash is not it


def test_checksum_mismatch_flashes_nothing(fleet, packages):
    new, _old = packages
    result = fleet.flash("fw-02", new, checksum="sha256:" + "0" * 64)["Run nvfwupd"]
    assert result["failed"] and "checksum mismatch" in result["msg"] and "Nothing was changed" in result["msg"]
    assert "state_record" not in result


def test_wrong_password_fails_and_no_password_in_any_output(fleet, packages):
    new, _old = packages
    result = fleet.flash("fw-01", new, bmc_pw=WRONG)["Run nvfwupd"]
    assert result["failed"] and "Error Code 1" in result["msg"] and "bmc.password" in result["msg"]
    for password in (WRONG, fleet.password):
        verbose = fleet.flash("fw-01", new, verbose=True, bmc_pw=password)
        assert "Run nvfwupd" in verbose.stdout
        assert password not in verbose.stdout + verbose.stderr
    assert _private_folders() == []  # the 0600 config files went with their folders


def test_a_bmc_not_answering_fails_within_the_timeout(fleet, packages):
    new, _old = packages
    assert gpusim("fault", "fw-02", "bmc_unresponsive", workdir=fleet.workdir).returncode == 0
    try:
        started = time.monotonic()
        result = fleet.flash("fw-02", new, fw_timeout=15)["Run nvfwupd"]
        took = time.monotonic() - started
    finally:
        gpusim("clear-faults", "fw-02", "bmc_unresponsive", workdir=fleet.workdir)
    assert result["failed"] and "did not finish within 15 s" in result["msg"] and "does not answer" in result["msg"], result
    assert took < 60
    assert _private_folders() == []


def test_no_plain_http_request_leaves_the_controller(fleet, packages):
    """nvfwupd retries a failed HTTPS connection over http:// with the same Basic credentials; the module blocks it."""
    new, _old = packages
    received = []
    listener = socket.create_server((NO_BMC, 80))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _addr = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(4096))
                except OSError:
                    received.append(b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        # The same listener does catch the tool without the module's protection: seen first.
        cfg = fleet.workdir / "plain.yaml"
        cfg.write_text(json.dumps({"TargetPlatform": "HGX", "BMC_IP": NO_BMC, "RF_USERNAME": "admin", "RF_PASSWORD": fleet.password}))
        run([str(opennvfwupd.python()), str(opennvfwupd.SOURCE / "nvfwupd.py"), "-c", str(cfg), "show_version", "-j"], timeout=60)
        cfg.unlink()
        assert received and b"Authorization: Basic" in received[0], received
        received.clear()
        # validate_certs false: the module's own certificate check would stop at the refused HTTPS port before nvfwupd runs
        result = fleet.flash("fw-01", new, bmc_at=NO_BMC, bmc_validate_certs=False)["Run nvfwupd"]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert result["failed"] and "Error Code 1" in result["msg"], result
    assert received == []


ROLE_PLAY = """
- name: The gpu_firmware role
  hosts: "{{ target }}"
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.gpu_firmware
        tasks_from: "{{ entry | default('main') }}"
    - name: Show the fact
      ansible.builtin.debug:
        var: gpu_firmware_activation_required
"""


def _role(fleet, target, package=None, entry="main", **extra):
    playbook = fleet.playbook.parent / "role.yml"
    playbook.write_text(ROLE_PLAY)
    evars = {
        "target": target,
        "entry": entry,
        "gpu_firmware_nvfwupd_path": str(opennvfwupd.SOURCE / "nvfwupd.py"),
        "gpu_firmware_nvfwupd_interpreter": str(opennvfwupd.python()),
        "gpu_firmware_poll_interval": 1,
        "gpu_firmware_timeout": 120,
        "gpu_firmware_bmc_reset_wait": 30,
        **extra,
    }
    if package is not None:
        evars.update(gpu_firmware_package=str(package), gpu_firmware_checksum="sha256:" + artifacts.sha256_file(package))
    proc = fleet.ansible_playbook(playbook, "-e", json.dumps(evars), json_output=True, timeout=400)
    doc = json_doc(proc)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert fleet.password not in proc.stdout + proc.stderr
    return doc


def _inventory(fleet, name):
    doc = fleet.redfish(name, "GET", "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_BMC_0")[1]
    return doc["Version"]


def test_role_main_flashes_activates_once_and_then_changes_nothing(fleet, packages):
    new, _old = packages
    first = _role(fleet, "fw-02", new)
    assert first["stats"]["fw-02"]["changed"] > 0 and first["stats"]["fw-02"]["failures"] == 0
    assert fleet.vbios("fw-02") == [NEW_VBIOS] * 8  # activated by the handler's GPU reset
    assert _inventory(fleet, "fw-02") == "HGX-24.04-2"  # and the HMC's reset
    assert fleet.state("fw-02")["history"][-1]["result"] == "ok"
    second = _role(fleet, "fw-02", new)
    assert second["stats"]["fw-02"]["changed"] == 0, second["stats"]
    fact = next(t for t in second["plays"][0]["tasks"] if t["task"]["name"] == "Show the fact")["hosts"]["fw-02"]
    assert fact["gpu_firmware_activation_required"] == []


def test_role_rollback_flashes_the_previous_package(fleet, packages):
    new, old = packages
    _role(fleet, "fw-02", old, gpu_firmware_allow_downgrade=True)  # fw-02 to the old package: the new one becomes previous
    assert fleet.vbios("fw-02") == [OLDER_VBIOS] * 8
    known = fleet.state("fw-02")["last_known_good"]["gpu_firmware"]
    assert known["version"] == "HGX-22.09-1" and known["previous"]["version"] == "HGX-24.04-2"
    # the node's file names the version; the controller's gpu_firmware_packages the package for it
    _role(fleet, "fw-02", entry="rollback",
          gpu_firmware_packages={"HGX-24.04-2": {"package": str(new), "checksum": "sha256:" + artifacts.sha256_file(new)}})
    assert fleet.vbios("fw-02") == [NEW_VBIOS] * 8
    assert fleet.state("fw-02")["last_known_good"]["gpu_firmware"]["version"] == "HGX-24.04-2"


def test_role_stages_on_a_gb200_tray_that_serves_until_its_aux_power_cycle(fleet, tmp_path):
    """A GB200 compute tray (issue 23): the role pushes the images staged (nvfwupd -u) while the host runs on, and
    activates them with the tray's AuxPowerCycle through its BMC (no GPU reset, no Systems PowerCycle); again: nothing."""
    tray_vbios = "97.00.C5.00.01"
    package = artifacts.write_fwpkg(tmp_path, "HGX-25.06-1", components={"HMC": "HGX-25.06-1", "GPU_SXM": tray_vbios},
                                    gpu_models=("NVIDIA GB200",))
    before = fleet.vbios("tray-01")
    staged = _role(fleet, "tray-01", package, gpu_firmware_servertype="GB200", gpu_firmware_activate=False)
    assert staged["stats"]["tray-01"]["failures"] == 0
    assert fleet.vbios("tray-01") == before  # staged only: the tray still runs its old firmware
    tasks = fleet.redfish("tray-01", "GET", "/redfish/v1/TaskService/Tasks")[1]["Members"]
    assert tasks, "no update task on the tray's BMC"
    boot = fleet.boot_id("tray-01")
    done = _role(fleet, "tray-01", package, gpu_firmware_servertype="GB200")
    names = [t["task"]["name"].split(" : ", 1)[-1] for t in done["plays"][0]["tasks"] if "tray-01" in t["hosts"]
             and not t["hosts"]["tray-01"].get("skipped")]
    assert "Power-cycle the compute tray through its BMC (AuxPowerCycle)" in names, names
    assert "Reset the GPUs" not in names and "Power-cycle the system through the BMC (AC power cycle)" not in names, names
    assert fleet.boot_id("tray-01") != boot
    assert fleet.vbios("tray-01") == [tray_vbios] * 4
    assert _inventory(fleet, "tray-01") == "HGX-25.06-1"
    again = _role(fleet, "tray-01", package, gpu_firmware_servertype="GB200")
    assert again["stats"]["tray-01"]["changed"] == 0, again["stats"]


# -- a killed run (issue 21) ----------------------------------------------------------------------------------------------


def _descendants(pid):
    """The processes below ``pid`` (this test's own ansible-playbook and what it started)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _record_path(fleet, name):
    return os.path.expanduser(f"~/.ansible/gpufleet/nvfwupd-force-update/{fleet.bmc[name]}_443.json")


def test_a_run_killed_between_force_update_enable_and_disable_is_closed_by_the_next(fleet, packages):
    """SIGKILL of the module (an async timeout, a cancelled AWX job, the OOM killer) while ForceUpdate is on: the record
    written before the enable is there, and the next run turns ForceUpdate off and removes the orphaned secret folder."""
    new, old = packages
    plan = fleet.flash("fw-01", new, check=True)["Run nvfwupd"]["plan"]
    package = new if any(r["action"] in ("downgrade", "replace_staged") for r in plan) else old  # either way through ForceUpdate
    evars = {
        "target": "fw-01",
        "package": str(package),
        "checksum": "sha256:" + artifacts.sha256_file(package),
        "nvfwupd_path": str(opennvfwupd.SOURCE / "nvfwupd.py"),
        "nvfwupd_interpreter": str(opennvfwupd.python()),
        "allow_downgrade": True,
    }
    record = _record_path(fleet, "fw-01")
    proc = subprocess.Popen(
        [str(ANSIBLE_PLAYBOOK), "-i", str(fleet.inventory), str(fleet.playbook), "-e", json.dumps(evars)],
        env=ansible_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not fleet.force_update("fw-01"):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before ForceUpdate was seen on"
            time.sleep(0.05)
        assert os.path.exists(record)  # written before the enable
        killed = []
        for pid in _descendants(proc.pid):
            try:
                if os.path.basename(os.readlink(f"/proc/{pid}/cwd")).startswith("gpufleet-nvfwupd-"):
                    os.kill(pid, signal.SIGKILL)  # the module (and nvfwupd) in its private folder
                    killed.append(pid)
            except OSError:
                continue
        assert killed, "no module process found in its private folder"
        proc.communicate(timeout=120)
        assert fleet.force_update("fw-01") is True  # the open door the kill left
        with open(record) as handle:
            left = json.load(handle)
        assert left["force_update"] == "on" and fleet.password not in json.dumps(left)
        after = fleet.flash("fw-01", package, allow_downgrade=True)["Run nvfwupd"]
        assert after["force_update"]["stale_record"] is True and after["force_update"]["found_on"] is True, after
        assert after["force_update"]["turned_off"] is True and not after.get("failed"), after
        assert fleet.force_update("fw-01") is False and not os.path.exists(record)
        assert _private_folders() == []  # Ansible's tmp dir, or the next run, removed the killed run's config file
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        fleet.redfish("fw-01", "PATCH", "/redfish/v1/UpdateService", {"HttpPushUriOptions": {"ForceUpdate": False}})
        if os.path.exists(record):
            os.unlink(record)


def test_someone_elses_force_update_refuses_a_flash_and_is_left_on(fleet, packages):
    new, old = packages
    plan = fleet.flash("fw-01", new, check=True)["Run nvfwupd"]["plan"]
    package = new if any(r["action"] != "none" for r in plan) else old  # something to flash
    fleet.redfish("fw-01", "PATCH", "/redfish/v1/UpdateService", {"HttpPushUriOptions": {"ForceUpdate": True}})
    try:
        checked = fleet.flash("fw-01", package, check=True, allow_downgrade=True)["Run nvfwupd"]
        assert checked["failed"] and "no record of this collection" in checked["msg"], checked  # check mode says so too
        refused = fleet.flash("fw-01", package, allow_downgrade=True)["Run nvfwupd"]
        assert refused["failed"] and "no record of this collection says a run of it turned it on" in refused["msg"], refused
        assert "Nothing was flashed" in refused["msg"] and fleet.force_update("fw-01") is True
    finally:
        fleet.redfish("fw-01", "PATCH", "/redfish/v1/UpdateService", {"HttpPushUriOptions": {"ForceUpdate": False}})
