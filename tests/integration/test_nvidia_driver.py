"""nvidia_driver module and role on simulated nodes over real SSH (gpusim).

Brings up tests/fixtures/driver/fleet-driver.yml (NVSwitch HGX H100 and PCIe L40S nodes on driver
550.90.07, installed by runfile) once for the file, writes real NVIDIA-Linux-x86_64-<v>.run files
(gpusim.artifacts) and runs `ansible NODE -m gpufleet.lifecycle.nvidia_driver` and the role's entry
points with ansible-playbook against the generated inventory. Results are read with the json
stdout callback; node facts from the simulator's per-node state and from nvidia-smi over SSH.

Each node keeps its node state file under /var/lib/gpusim (its own folder): the default
/etc/ansible/facts.d/gpufleet.fact would be the controller's file, shared by every simulated node.
Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_nvidia_driver.py -m integration -q
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
from typing import ClassVar

import pytest
from fleet import TESTS, fleet_up, needs_fleet
from fleet import Fleet as BaseFleet
from gpusim import artifacts
from gpusim import state as gstate

SPEC = TESTS / "fixtures" / "driver" / "fleet-driver.yml"
OLD, NEW = "550.90.07", "570.124.06"
STATE_FILE = "/var/lib/gpusim/gpufleet.fact"  # inside the node's own folder (see the module docstring)

pytestmark = needs_fleet()

ROLE_PLAYBOOK = """
- name: nvidia_driver role entry point on simulated nodes
  hosts: "{{ targets }}"
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.nvidia_driver
        tasks_from: "{{ entry }}"
"""


class Fleet(BaseFleet):
    # Ansible's default, here only: each module is copied to the node (sftp) and run from there, not piped into python.
    env_extra: ClassVar[dict[str, str]] = {"ANSIBLE_PIPELINING": "False"}

    def __init__(self, workdir: pathlib.Path, runfiles: dict[str, dict[str, str]]):
        super().__init__(workdir)
        self.runfiles = runfiles
        self.playbook = workdir / "role.yml"
        self.playbook.write_text(ROLE_PLAYBOOK)

    def module(self, pattern: str, args: dict, *, check: bool = False, diff: bool = False) -> dict[str, dict]:
        """`ansible PATTERN -m gpufleet.lifecycle.nvidia_driver -a ARGS` -> {host: result}."""
        return super().module("gpufleet.lifecycle.nvidia_driver", pattern, dict(args, state_file=STATE_FILE), check=check, diff=diff)

    def role(self, targets: str, entry: str, extra: dict, *, check: bool = False) -> subprocess.CompletedProcess:
        variables = {
            "targets": targets, "entry": entry, "nvidia_driver_state_file": STATE_FILE, "nvidia_driver_hold_kernel": False,
            "nvidia_driver_runfiles": self.runfiles, "nvidia_driver_reboot_timeout": 120, **extra,
        }
        return self.ansible_playbook(self.playbook, "-e", json.dumps(variables), *(["--check"] if check else []))

    def sim(self, name: str) -> dict:
        """The simulator's state of the node (what the hardware and the package database say)."""
        return gstate.load(self.node_dir(name))

    def fact(self, name: str) -> dict:
        """The node state file the module wrote on that node (/var/lib/gpusim is the node's own folder)."""
        return json.loads((self.node_dir(name) / "gpufleet.fact").read_text())

    def smi_version(self, name: str) -> str:
        proc = self.ssh(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        versions = set(proc.stdout.split())
        assert len(versions) == 1, proc.stdout
        return versions.pop()

    def fabricmanager(self, name: str) -> tuple[str | None, str]:
        """(version, service state) of the node's fabric manager, as the node's tools report them."""
        fm = self.sim(name).get("fabricmanager")
        state = self.ssh(name, "systemctl is-active nvidia-fabricmanager").stdout.strip()
        return (fm or {}).get("version"), state


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("gpusim-driver")
    workdir = base / "fleet"
    art = base / "runfiles"
    runfiles = {}
    for version in (OLD, NEW):
        path = artifacts.write_driver_runfile(art, version)
        runfiles[version] = {"source": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    with fleet_up(SPEC, workdir):
        yield Fleet(workdir, runfiles)


def driver_args(fleet: Fleet, version: str, **extra) -> dict:
    return {"version": version, **fleet.runfiles[version], **extra}


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


# --- upgrade ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def upgraded(fleet):
    before = {name: fleet.sim(name) for name in ("hgx-01", "pcie-01")}
    return before, four_steps(fleet, "hgx-01,pcie-01", driver_args(fleet, NEW))


def test_upgrade_changes_once_in_four_steps(upgraded):
    _before, steps = upgraded
    for host in ("hgx-01", "pcie-01"):
        assert changed(steps, host) == ALL_CHANGED_ONCE
        assert steps["check"][host]["plan"]["driver"] == {
            "action": "upgrade", "before": OLD, "after": NEW, "kernel_module_before": "open", "kernel_module_after": "open",
        }
        assert steps["real"][host]["after"]["driver"]["installed_version"] == NEW
        assert steps["real"][host]["after"]["driver"]["nvidia_smi_version"] == NEW
        assert steps["real"][host]["reboot_required"] is False
        assert steps["idempotent"][host]["plan"]["driver"]["action"] == "none"
    assert steps["check"]["hgx-01"]["diff"] == {
        "before": {"driver": OLD, "kernel_module": "open", "fabricmanager": OLD},
        "after": {"driver": NEW, "kernel_module": "open", "fabricmanager": NEW},
    }
    # The PCIe node has no fabric manager to show.
    assert steps["check"]["pcie-01"]["diff"] == {"before": {"driver": OLD, "kernel_module": "open"}, "after": {"driver": NEW, "kernel_module": "open"}}


def test_check_mode_changed_nothing(upgraded):
    before, steps = upgraded
    # check ran first: its "after" is the node as it was, and the simulator's state said the same then.
    for host in ("hgx-01", "pcie-01"):
        assert steps["check"][host]["after"] == steps["check"][host]["before"]
        assert before[host]["driver"]["version"] == OLD


def test_upgrade_reaches_the_node(fleet, upgraded):
    for host in ("hgx-01", "pcie-01"):
        assert fleet.smi_version(host) == NEW
        sim = fleet.sim(host)
        assert (sim["driver"]["version"], sim["driver"]["flavor"], sim["driver"]["dkms"]) == (NEW, "open", True)
        assert sim["services"]["nvidia-persistenced"]["active"]
        assert sim["services"]["nvidia-dcgm"]["active"]
        fact = fleet.fact(host)
        assert fact["last_known_good"]["driver"]["version"] == OLD
        assert [(h["action"], h["before"], h["after"], h["result"]) for h in fact["history"]] == [
            ("upgrade", OLD, NEW, "started"), ("upgrade", OLD, NEW, "ok"),
        ]


def test_fabric_manager_follows_the_driver_on_nvswitch_nodes(fleet, upgraded):
    _before, steps = upgraded
    assert steps["real"]["hgx-01"]["plan"]["fabricmanager"] == {"action": "upgrade", "before": OLD, "after": NEW, "managed": True}
    assert steps["real"]["hgx-01"]["after"]["nvswitch"] is True
    assert fleet.fabricmanager("hgx-01") == (NEW, "active")
    # Installed from the distribution package at the driver's version, held (simulated apt on the node).
    sim = fleet.sim("hgx-01")
    assert sim["apt"]["held"] == ["nvidia-fabricmanager-570"]
    query = fleet.ssh("hgx-01", "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-fabricmanager-*'")
    assert query.stdout == "nvidia-fabricmanager-570 570.124.06-1 hi \n", query.stderr
    assert fleet.fact("hgx-01")["last_known_good"]["fabricmanager"]["version"] == OLD
    # The controller's own package database is untouched (the nodes share its filesystem).
    host = subprocess.run(["dpkg-query", "-W", "nvidia-fabricmanager-*"], capture_output=True, text=True, check=False)
    assert host.stdout == ""


def test_node_tools_come_first_on_path(fleet):
    """The module finds the node's simulated package tools and modinfo in /usr/local/bin, not the controller's."""
    proc = fleet.ssh("pcie-01", "for t in apt-get apt-mark dpkg-query modinfo; do command -v $t; done; modinfo -F version nvidia")
    assert proc.stdout.splitlines()[:4] == [f"/usr/local/bin/{t}" for t in ("apt-get", "apt-mark", "dpkg-query", "modinfo")]
    assert proc.stdout.splitlines()[4] in (OLD, NEW)


def test_fabric_manager_left_alone_on_pcie_nodes(fleet, upgraded):
    _before, steps = upgraded
    plan = steps["real"]["pcie-01"]["plan"]["fabricmanager"]
    assert plan == {"action": "none", "before": None, "after": None, "managed": False}
    assert steps["real"]["pcie-01"]["after"]["nvswitch"] is False
    sim = fleet.sim("pcie-01")
    assert sim["fabricmanager"] is None
    assert sim.get("apt", {}).get("held", []) == []


# --- downgrade ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def refused(fleet, upgraded):
    return fleet.module("hgx-01,pcie-01", driver_args(fleet, OLD))


def test_downgrade_refused_without_allow_downgrade(fleet, refused):
    for host in ("hgx-01", "pcie-01"):
        result = refused[host]
        assert result["failed"] is True
        assert result["changed"] is False
        assert f"driver {NEW} is installed and {OLD} is older: refusing to downgrade" in result["msg"]
        assert "allow_downgrade: true" in result["msg"]
        assert fleet.smi_version(host) == NEW
    assert fleet.fabricmanager("hgx-01") == (NEW, "active")


@pytest.fixture(scope="module")
def downgraded(fleet, refused):
    return four_steps(fleet, "hgx-01,pcie-01", driver_args(fleet, OLD, allow_downgrade=True))


def test_downgrade_changes_once_in_four_steps(fleet, downgraded):
    for host in ("hgx-01", "pcie-01"):
        assert changed(downgraded, host) == ALL_CHANGED_ONCE
        assert downgraded["check"][host]["plan"]["driver"]["action"] == "downgrade"
        assert downgraded["real"][host]["after"]["driver"]["nvidia_smi_version"] == OLD
        assert fleet.smi_version(host) == OLD
        # The last known good was the upgraded driver when the downgrade started.
        assert fleet.fact(host)["last_known_good"]["driver"]["version"] == NEW
    assert downgraded["real"]["hgx-01"]["plan"]["fabricmanager"]["action"] == "downgrade"
    assert fleet.fabricmanager("hgx-01") == (OLD, "active")
    assert fleet.sim("hgx-01")["apt"]["held"] == ["nvidia-fabricmanager-550"]
    assert fleet.sim("pcie-01")["fabricmanager"] is None


# --- the role: main and rollback --------------------------------------------------------------------

KERNEL_STANZA = """Package: linux-image-{kernel}
Status: install ok installed
Priority: optional
Section: kernel
Installed-Size: 400000
Maintainer: Debian Kernel Team <debian-kernel@lists.debian.org>
Architecture: amd64
Source: linux-signed-amd64
Version: 6.1.76-1
Description: Linux for 64-bit PCs (signed)

"""
APT_HOLD_FILE = "/etc/apt/apt.conf.d/51gpufleet-kernel-hold"


def selection(fleet: Fleet, host: str | None, package: str) -> str:
    """dpkg's selection of PACKAGE on HOST (None: the controller), '' when dpkg does not know it."""
    command = f"dpkg --get-selections {package} 2>/dev/null"
    if host is None:
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False).stdout.split()
    else:
        out = fleet.ssh(host, command).stdout.split()
    return out[-1] if out else ""


@pytest.fixture(scope="module")
def role_main(fleet):
    # A real node has the package of the kernel it runs: give hgx-02 its own (the node's /var/lib is its own disk).
    kernel = fleet.ssh_ok("hgx-02", "uname -r").strip()
    fleet.ssh_ok("hgx-02", f"printf '%s' '{KERNEL_STANZA.format(kernel=kernel)}' >> /var/lib/dpkg/status")
    proc = fleet.role("hgx-02", "main", {"nvidia_driver_version": NEW, "nvidia_driver_hold_kernel": True})
    proc.kernel_package = f"linux-image-{kernel}"
    return proc


def test_role_main_installs_activates_and_verifies(fleet, role_main):
    assert role_main.returncode == 0, role_main.stdout[-4000:] + role_main.stderr[-2000:]
    out = role_main.stdout
    # nvidia_driver_hold_kernel: true: the running kernel's package is held on that node, and only there.
    assert re.search(r"Hold the running kernel packages \(apt\)\] \*+\nchanged: \[hgx-02\] => \(item=linux-image-", out), out[-4000:]
    assert selection(fleet, "hgx-02", role_main.kernel_package) == "hold"
    assert selection(fleet, "hgx-01", role_main.kernel_package) == ""
    assert selection(fleet, None, role_main.kernel_package) == ""  # the controller's dpkg never heard of it
    assert '"linux-";' in fleet.ssh_ok("hgx-02", f"cat {APT_HOLD_FILE}")
    assert fleet.ssh("hgx-01", f"test -e {APT_HOLD_FILE}").returncode == 1
    assert not pathlib.Path(APT_HOLD_FILE).exists()
    # The installer ran as an async job (nvidia_driver_async: true by default) and changed the node.
    assert "changed: [hgx-02]" in out.split("TASK [gpufleet.lifecycle.nvidia_driver : Keep the installer's result]", 1)[1].split("TASK [", 1)[0]
    assert re.search(r"Wait for the driver installer\] \*+\n(FAILED - RETRYING.*\n)*(ok|changed): \[hgx-02\]", out)
    # The activation step (activate.yml, included only where the installer could not load the new modules in place): a
    # task of the role, no handler, which a node's include of the role elsewhere in a free play could run under its own
    # conditions (CI27).
    assert re.search(r"Activate the driver now \(reload happened in place[^\]]*\] \*+\n(included: \S*activate\.yml for hgx-02|skipping: \[hgx-02\])",
                     out), out[-3000:]
    assert "RUNNING HANDLER" not in out
    assert re.search(r"Check that the fabric manager matches the driver on NVSwitch systems\] \*+\nok: \[hgx-02\]", out)
    assert "hgx-02                     : ok=" in out and "failed=0" in out
    assert fleet.smi_version("hgx-02") == NEW
    assert fleet.fabricmanager("hgx-02") == (NEW, "active")
    assert fleet.fact("hgx-02")["last_known_good"]["driver"] == {
        "version": OLD, "kernel_module": "open", "method": "runfile", "recorded_at": fleet.fact("hgx-02")["last_known_good"]["driver"]["recorded_at"],
    }


@pytest.fixture(scope="module")
def role_rollback(fleet, role_main):
    assert role_main.returncode == 0
    return fleet.role("hgx-02", "rollback", {})


def test_role_rollback_restores_the_previous_driver(fleet, role_rollback):
    assert role_rollback.returncode == 0, role_rollback.stdout[-4000:] + role_rollback.stderr[-2000:]
    assert f"TASK [gpufleet.lifecycle.nvidia_driver : Restore NVIDIA driver {OLD}]" in role_rollback.stdout
    assert fleet.smi_version("hgx-02") == OLD
    assert fleet.fabricmanager("hgx-02") == (OLD, "active")
    fact = fleet.fact("hgx-02")
    # The rollback keeps the last known good record and logs a downgrade.
    assert fact["last_known_good"]["driver"]["version"] == OLD
    assert [(h["action"], h["after"], h["result"]) for h in fact["history"]][-2:] == [("downgrade", OLD, "started"), ("downgrade", OLD, "ok")]


def assert_untouched(fleet: Fleet, host: str) -> None:
    """The node still runs the old driver and fabric manager, and no node state file was written."""
    assert fleet.smi_version(host) == OLD
    assert fleet.sim(host)["driver"]["version"] == OLD
    assert fleet.fabricmanager(host) == (OLD, "active")
    assert not (fleet.node_dir(host) / "gpufleet.fact").exists()


def test_role_main_in_check_mode_plans_and_changes_nothing(fleet):
    proc = fleet.role("check-hgx", "main", {"nvidia_driver_version": NEW}, check=True)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    # Check mode runs the module in place (no async job): its plan says changed.
    assert "changed: [check-hgx]" in out.split(f"TASK [gpufleet.lifecycle.nvidia_driver : Run the driver installer for {NEW}]", 1)[1].split("TASK [", 1)[0]
    assert re.search(r"Wait for the driver installer\] \*+\nskipping: \[check-hgx\]", out)
    # Nothing was installed: the verification, which would see the old driver, is skipped.
    for name in ("Check that the driver answers with the expected version", "Check that the fabric manager matches the driver on NVSwitch systems"):
        assert re.search(re.escape(name) + r"\] \*+\nskipping: \[check-hgx\]", out), name
    assert "check-hgx                  : ok=" in out and "failed=0" in out
    assert_untouched(fleet, "check-hgx")


def test_role_main_refuses_a_working_driver_without_a_runfile_to_roll_back_to(fleet):
    """Runfile method: 550.90.07 works now and would become the last known good, but no runfile for it is listed."""
    proc = fleet.role("check-hgx", "main", {"nvidia_driver_version": NEW, "nvidia_driver_runfiles": {NEW: fleet.runfiles[NEW]}})
    out = proc.stdout
    assert proc.returncode != 0
    assert f"driver {OLD} works on this node now and becomes its last known good version" in out
    assert f"Install NVIDIA driver {NEW}" not in out
    assert_untouched(fleet, "check-hgx")


# --- failures leave the old driver working -------------------------------------------------------

@pytest.fixture(scope="module")
def failures(fleet):
    wrong = dict(fleet.runfiles[NEW], checksum=fleet.runfiles[OLD]["checksum"])  # a valid sha256, of another file
    results = fleet.module("fail-sum", {"version": NEW, **wrong})
    # fail-dkms carries the dkms_fail fault, fail-proc a process on GPU 1 (see the spec).
    results.update(fleet.module("fail-dkms,fail-proc", driver_args(fleet, NEW)))
    return results


def assert_old_driver_works(fleet: Fleet, host: str, result: dict) -> None:
    assert result["failed"] is True and result["changed"] is False
    assert fleet.smi_version(host) == OLD
    sim = fleet.sim(host)
    assert sim["driver"]["version"] == OLD
    assert "nvidia" in sim["modules"]
    assert sim["services"]["nvidia-persistenced"]["active"]
    if sim["nvswitch"]:
        assert fleet.fabricmanager(host) == (OLD, "active")


def test_checksum_mismatch_fails_before_anything(fleet, failures):
    result = failures["fail-sum"]
    assert result["msg"].startswith(f"checksum mismatch for {fleet.runfiles[NEW]['source']}: sha256 is ")
    assert "Nothing was changed" in result["msg"]
    assert "sha256:" + result["sha256"] == fleet.runfiles[NEW]["checksum"]
    assert_old_driver_works(fleet, "fail-sum", result)
    # Verified before the node state is touched: no history entry.
    assert not (fleet.node_dir("fail-sum") / "gpufleet.fact").exists()


def test_dkms_failure_reloads_the_old_driver(fleet, failures):
    result = failures["fail-dkms"]
    assert "the kernel module build (DKMS) failed" in result["msg"]
    assert "(installer exit status 1)" in result["msg"]
    assert "Error! Bad return status for module build" in result["stdout"]
    assert result["node_state"]["driver_loaded"] == OLD and result["node_state"]["nvidia_smi"] == "ok"
    assert_old_driver_works(fleet, "fail-dkms", result)
    assert [h["result"] for h in fleet.fact("fail-dkms")["history"]] == ["started", "failed"]


def test_gpu_process_refused(fleet, failures):
    result = failures["fail-proc"]
    assert result["msg"].startswith("1 process(es) use the GPUs: python3 (pid 777001, GPU GPU-")
    assert "Nothing was changed" in result["msg"]
    assert [p["pid"] for p in result["gpu_processes"]] == [777001]
    assert_old_driver_works(fleet, "fail-proc", result)
    assert fleet.sim("fail-proc")["processes"][0]["pid"] == 777001


# --- options refused before anything changes (issue 8) ----------------------------------------------------

def test_role_refuses_a_source_url_with_a_password_and_never_shows_it(fleet):
    """The preflight's module call refuses it; at -vvv neither the output nor the registered results carry the secret."""
    secret_url = "https://fleet:hunter2@artifacts.example.com/NVIDIA-Linux-x86_64-570.124.06.run?X-Amz-Signature=hunter2"  # noqa: S105 (made up)
    runfiles = {OLD: fleet.runfiles[OLD], NEW: {"source": secret_url, "checksum": fleet.runfiles[NEW]["checksum"]}}
    variables = {"targets": "check-hgx", "entry": "main", "nvidia_driver_state_file": STATE_FILE, "nvidia_driver_hold_kernel": False,
                 "nvidia_driver_runfiles": runfiles, "nvidia_driver_version": NEW}
    proc = fleet.ansible_playbook(fleet.playbook, "-vvv", "-e", json.dumps(variables))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "source carries a user name or password (user:password@ before the host)" in out
    assert "hunter2" not in out
    assert f"Install NVIDIA driver {NEW}" not in out
    assert_untouched(fleet, "check-hgx")


@pytest.mark.parametrize(("extra", "message"), [
    ({"nvidia_driver_timeout": 0}, "must be whole numbers of seconds from 1 to 86400"),
    # The package method: the preflight's module call (check mode, both methods) refuses it by the module's own rule.
    ({"nvidia_driver_version": NEW + "\n", "nvidia_driver_method": "package", "nvidia_driver_package_manager": "apt"},
     "version '570.124.06\\n' is not a whole NVIDIA driver version"),
], ids=["timeout-0", "version-newline"])
def test_role_refuses_a_bad_option_before_anything_changes(fleet, extra, message):
    proc = fleet.role("check-hgx", "main", {"nvidia_driver_version": NEW, **extra})
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-3000:]
    assert "Install NVIDIA driver" not in proc.stdout
    assert_untouched(fleet, "check-hgx")


# --- Secure Boot (issue 24): sb-01 enforces it -------------------------------------------------------------

def signing_pair() -> tuple[str, str, str]:
    """A module-signing key pair made for this run: (PEM key, PEM certificate, certificate SHA1 as mokutil lists it)."""
    import datetime
    import hashlib

    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "gpufleet test MOK")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(0x5EC0)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    der = cert.public_bytes(serialization.Encoding.DER)
    return pem_key, cert.public_bytes(serialization.Encoding.PEM).decode(), hashlib.sha1(der).hexdigest()  # noqa: S324


def test_secure_boot_node_needs_an_enrolled_key_and_loads_signed_modules(fleet):
    pem_key, pem_cert, sha1 = signing_pair()
    signing = {"module_signing_key": pem_key, "module_signing_certificate": pem_cert}

    def untouched() -> None:
        sim = fleet.sim("sb-01")
        assert sim["driver"]["version"] == OLD and "nvidia" in sim["modules"]
        assert not (fleet.node_dir("sb-01") / "gpufleet.fact").exists()

    refused = fleet.module("sb-01", driver_args(fleet, NEW))["sb-01"]
    assert refused.get("failed") and "Secure Boot is enforced on this node and no module signing key was given" in refused["msg"], refused
    untouched()
    refused = fleet.module("sb-01", driver_args(fleet, NEW, **signing))["sb-01"]
    assert refused.get("failed") and f"(SHA1 {sha1}, CN gpufleet test MOK) is not enrolled" in refused["msg"], refused
    untouched()

    # The operator enrolls the MOK (mokutil --import, a reboot through the MOK manager): the node's firmware now lists it.
    gstate.update(fleet.node_dir("sb-01"), lambda s: s["stack"]["secure_boot"]["keys"].append({"sha1": sha1, "cn": "gpufleet test MOK"}))
    # The role, as the rollout runs it: its preflight checks the enrollment, verify every module's signer.
    proc = fleet.role("sb-01", "main", {"nvidia_driver_version": NEW, "nvidia_driver_module_signing_key": pem_key,
                                        "nvidia_driver_module_signing_certificate": pem_cert, "nvidia_driver_secure_boot": "enforced",
                                        "nvidia_driver_module_signing_certificate_sha1": sha1})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"Check that every NVIDIA module is signed by the module signing key\] \*+\nok: \[sb-01\]", proc.stdout), proc.stdout[-4000:]
    for line in pem_key.splitlines()[1:-1]:
        assert line not in proc.stdout + proc.stderr
    assert fleet.smi_version("sb-01") == NEW
    sim = fleet.sim("sb-01")
    assert sim["driver"]["signature"]["sha1"] == sha1 and set(sim["modules"]) >= {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"}
    assert "signer:         gpufleet test MOK" in fleet.ssh_ok("sb-01", "modinfo nvidia_drm")
    # Nothing of the key is left on the node: no private folder, no DKMS drop-in naming it.
    leftovers = fleet.ssh("sb-01", "ls -d /etc/dkms/framework.conf.d/gpufleet-module-signing.conf; "
                                   "find /root /tmp /var/tmp -name 'gpufleet-signing.*' 2>/dev/null; grep -rl 'PRIVATE KEY' /root/.ansible 2>/dev/null")
    assert leftovers.stdout.strip() == "", leftovers.stdout
