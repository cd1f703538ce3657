"""The simulator lets a node be a node: its own disk, Slurm that sees its reboots, resume, upgrade faults.

Real sshd, real Ansible, real Slurm (tests/gpusim/specs/node-3.yml: 127.0.21.x, slurmctld on 18100).
Needs root and tests/gpusim/install-deps.sh. Run:
    .venv/bin/python -m pytest tests/integration/test_gpusim_node.py -m integration -q -p no:cacheprovider
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import time
import uuid

import pytest
import yaml
from fleet import TESTS, Fleet, fleet_up, needs_fleet
from fleet import gpusim as fleet_gpusim
from fleet import run as fleet_run
from gpusim import node as gnode

SPEC = TESTS / "gpusim" / "specs" / "node-3.yml"
# A package the controller has installed (the dpkg database the nodes' overlays start from).
HOLD_PACKAGE = "openssh-server"

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_up(SPEC, tmp_path_factory.mktemp("gpusim") / "fleet", timeout=180) as workdir:
        yield Fleet(workdir)


def controller_selection(package: str) -> str:
    done = subprocess.run(["dpkg", "--get-selections", package], capture_output=True, text=True, check=False)
    return done.stdout.split()[-1] if done.stdout.split() else ""


def node_selection(fleet: Fleet, name: str, package: str) -> str:
    return fleet.ssh_ok(name, f"dpkg --get-selections {package}").split()[-1]


def reboot(fleet: Fleet, name: str) -> None:
    """ansible.builtin.reboot of one node, as the roles reboot."""
    done = fleet.ansible(name, "-m", "ansible.builtin.reboot", "-a", "reboot_timeout=60", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# --- P1: every node its own /etc, /var/lib... ----------------------------------------------------------

def test_a_fact_file_written_on_one_node_is_on_that_node_only_and_survives_its_reboot(fleet):
    marker = uuid.uuid4().hex
    fact = f"/etc/ansible/facts.d/gpusim-{marker}.fact"
    # The node's /etc starts as the controller's, which may lack /etc/ansible (a bare Debian has none): make it, as a
    # playbook that writes local facts does.
    controller_had_it = pathlib.Path("/etc/ansible/facts.d").exists()
    made = fleet.module("ansible.builtin.file", "node-03", {"path": "/etc/ansible/facts.d", "state": "directory", "mode": "0755"})
    assert not made["node-03"].get("failed"), made
    done = fleet.module("ansible.builtin.copy", "node-03", {"dest": fact, "content": json.dumps({"marker": marker}),
                                                            "mode": "0644"})
    assert done["node-03"]["changed"] is True, done
    assert not pathlib.Path(fact).exists(), "the node wrote the controller's /etc"
    assert pathlib.Path("/etc/ansible/facts.d").exists() == controller_had_it, "the node made the controller's /etc/ansible"
    assert fleet.ssh("node-01", f"test -e {fact}").returncode == 1
    facts = fleet.module("ansible.builtin.setup", "node-03,node-01", {"gather_subset": ["!all", "!min", "local"]})
    assert facts["node-03"]["ansible_facts"]["ansible_local"][f"gpusim-{marker}"] == {"marker": marker}
    assert f"gpusim-{marker}" not in facts["node-01"]["ansible_facts"].get("ansible_local", {})

    boot_id = fleet.ssh_ok("node-03", "cat /proc/sys/kernel/random/boot_id")
    reboot(fleet, "node-03")
    assert fleet.ssh_ok("node-03", "cat /proc/sys/kernel/random/boot_id") != boot_id
    assert json.loads(fleet.ssh_ok("node-03", f"cat {fact}")) == {"marker": marker}  # its disk
    assert not pathlib.Path(fact).exists()


def test_a_package_hold_is_the_nodes_own_and_survives_its_reboot(fleet):
    """dpkg_selections (what nvidia_driver's kernel hold runs) on one node: the other node and the controller keep theirs."""
    assert controller_selection(HOLD_PACKAGE) == "install"
    try:
        done = fleet.module("ansible.builtin.dpkg_selections", "node-02", {"name": HOLD_PACKAGE, "selection": "hold"})
        assert done["node-02"]["changed"] is True, done
        assert node_selection(fleet, "node-02", HOLD_PACKAGE) == "hold"
        assert node_selection(fleet, "node-03", HOLD_PACKAGE) == "install"
        assert controller_selection(HOLD_PACKAGE) == "install"
        # The simulated apt-mark (NVIDIA's packages, in the node's state) is per node too.
        fleet.ssh_ok("node-02", "apt-mark hold nvidia-fabricmanager-570")
        assert fleet.ssh_ok("node-02", "apt-mark showhold").split() == ["nvidia-fabricmanager-570"]
        assert fleet.ssh_ok("node-03", "apt-mark showhold").split() == []
        reboot(fleet, "node-02")
        assert node_selection(fleet, "node-02", HOLD_PACKAGE) == "hold"
        again = fleet.module("ansible.builtin.dpkg_selections", "node-02", {"name": HOLD_PACKAGE, "selection": "hold"})
        assert again["node-02"]["changed"] is False
    finally:
        if controller_selection(HOLD_PACKAGE) == "hold":  # only if the node wrote through to the controller
            subprocess.run(["dpkg", "--set-selections"], input=f"{HOLD_PACKAGE} install\n", text=True, check=False)


def test_modprobe_apt_and_download_folders_are_the_nodes_own(fleet):
    marker = uuid.uuid4().hex
    paths = [f"/etc/modprobe.d/gpusim-{marker}.conf", f"/etc/apt/apt.conf.d/51gpusim-{marker}",
             f"/var/cache/gpufleet/nic/gpusim-{marker}.bin", f"/var/tmp/gpusim-{marker}", f"/opt/gpusim-{marker}",
             f"/var/lib/gpusim-{marker}", f"/root/gpusim-{marker}", f"/var/log/gpusim-{marker}.log"]
    fleet.ssh_ok("node-03", " && ".join(f"mkdir -p {pathlib.Path(p).parent} && echo {marker} > {p}" for p in paths))
    for path in paths:
        assert not pathlib.Path(path).exists(), f"{path}: the node wrote on the controller"
        assert fleet.ssh("node-01", f"test -e {path}").returncode == 1, f"{path}: seen on another node"
        assert fleet.ssh_ok("node-03", f"cat {path}").strip() == marker
    # The controller's files stay readable on the node (the overlay's lower layer), unchanged by it.
    assert fleet.ssh_ok("node-03", "cat /etc/os-release") == pathlib.Path("/etc/os-release").read_text()


def test_a_node_has_its_own_hostname_and_machine_id_files(fleet):
    ids = set()
    for name in ("node-01", "node-02", "node-03"):
        hostname, machine_id = fleet.ssh_ok(name, "cat /etc/hostname /etc/machine-id").split()
        assert hostname == name
        ids.add(machine_id)
    assert len(ids) == 3
    assert pathlib.Path("/etc/hostname").read_text().strip() not in {"node-01", "node-02", "node-03"}


def test_the_simulators_own_mounts_sit_on_top_of_the_overlays(fleet):
    """/var/lib/gpusim is the node's folder and /etc/slurm the fleet's config, although /var/lib and /etc are overlays."""
    out = fleet.ssh_ok("node-01", "cat /var/lib/gpusim/node.json; echo; grep -c NodeName= /etc/slurm/slurm.conf")
    record, count = out.rsplit("\n", 2)[0], out.split()[-1]
    assert json.loads(record)["name"] == "node-01"
    assert count == "3"
    mounts = fleet.ssh_ok("node-01", "cat /proc/self/mountinfo")
    types = {line.split()[4]: line.split(" - ")[1].split()[0] for line in mounts.splitlines()}
    assert types["/etc"] == "overlay" and types["/var/lib"] == "overlay"
    assert "/var/lib/gpusim" in types and "/etc/slurm" in types


def test_slurm_client_runs_slurm_on_the_controller_with_the_fleets_config(fleet, tmp_path):
    playbook = tmp_path / "client.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "slurm_clients", "gather_facts": False,
        "environment": "{{ gpufleet_slurm_environment }}",
        "tasks": [{"name": "ask Slurm", "ansible.builtin.command": "scontrol show node node-03", "register": "out",
                   "changed_when": False},
                  {"ansible.builtin.debug": {"msg": "ANSWER {{ out.stdout.split()[0] }} {{ rack_of_node_03 }}"},
                   "vars": {"rack_of_node_03": "{{ hostvars['node-03'].rack }}"}}],
    }]))
    done = fleet.ansible_playbook(playbook)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ANSWER NodeName=node-03 r2" in done.stdout
    listed = fleet_run([str(TESTS.parent / ".venv" / "bin" / "ansible-inventory"), "-i", str(fleet.inventory), "--graph", "gpu"],
                       timeout=60)
    assert "node-01" in listed.stdout and "slurmctl" not in listed.stdout


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s (last: {value!r})")
        time.sleep(interval)


# --- P2: a job on a node that reboots dies, as on a real cluster -------------------------------------------

def job(fleet: Fleet, job_id: str) -> dict[str, str]:
    """`scontrol show job -o` as {key: value}."""
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, env=fleet.slurm_env,
                          check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    return dict(word.split("=", 1) for word in done.stdout.split() if "=" in word)


def submit(fleet: Fleet, node: str, command: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", "-w", node, "-o", "/dev/null", "-D", "/tmp", "--wrap", command],
                          capture_output=True, text=True, env=fleet.slurm_env, check=True, timeout=30)
    job_id = done.stdout.strip().split(";")[0]
    wait_for(lambda: job(fleet, job_id)["JobState"] == "RUNNING", 30, f"job {job_id} running")
    return job_id


def node_state(fleet: Fleet, name: str) -> str:
    done = subprocess.run(["sinfo", "-h", "-N", "-n", name, "-o", "%t"], capture_output=True, text=True, env=fleet.slurm_env,
                          check=False, timeout=30)
    return done.stdout.strip()


def scontrol_state(fleet: Fleet, name: str) -> str:
    done = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True, text=True, env=fleet.slurm_env,
                          check=False, timeout=30)
    return next((w.split("=", 1)[1] for w in done.stdout.split() if w.startswith("State=")), "")


def wait_node_state(fleet: Fleet, name: str, want: tuple[str, ...], timeout: float, read=scontrol_state) -> float:
    """Seconds until the node's state (scontrol's State=, or read's) is one of want; fails naming the states seen."""
    started = time.monotonic()
    seen: list[str] = []
    while time.monotonic() - started < timeout:
        seen.append(read(fleet, name))
        if seen[-1] in want:
            return time.monotonic() - started
        time.sleep(0.1)
    pytest.fail(f"{name}: not {want} within {timeout}s; states seen: {sorted(set(seen))}")


def ended_by_the_node(record: dict[str, str]) -> bool:
    """Real Slurm's two outcomes for a batch job whose node rebooted under it: NODE_FAIL, or requeued (Restarts)."""
    return record["JobState"] in ("NODE_FAIL", "FAILED") or int(record.get("Restarts", "0")) >= 1


def node_cmdlines(fleet: Fleet, name: str) -> list[bytes]:
    """The command lines of the node's processes (those of its mount namespace; the PID namespace is the machine's)."""
    cmdlines = []
    for pid in gnode.processes(fleet.node_dir(name)):
        with contextlib.suppress(OSError):
            cmdlines.append(pathlib.Path(f"/proc/{pid}/cmdline").read_bytes())
    return cmdlines


def ended(fleet: Fleet, job_id: str) -> dict[str, str] | None:
    record = job(fleet, job_id)
    return record if ended_by_the_node(record) else None


def test_a_job_on_a_node_that_reboots_dies_with_it(fleet):
    """A job started just before the reboot (the hard case: younger than Slurm's grace for missing batch jobs)."""
    job_id = submit(fleet, "node-03", "sleep 3600")
    boot_id = fleet.ssh_ok("node-03", "cat /proc/sys/kernel/random/boot_id")
    fleet.ssh("node-03", "shutdown -r now")  # 255 or 0: the session dies with the node
    wait_for(lambda: fleet.ssh("node-03", "cat /proc/sys/kernel/random/boot_id").stdout not in ("", boot_id), 60,
             "node-03 back with a new boot_id")
    record = wait_for(lambda: ended(fleet, job_id), 60, f"job {job_id} ended by the reboot")
    assert record["JobState"] != "RUNNING" or int(record["Restarts"]) >= 1
    log = (fleet.workdir / "slurm" / "log" / "slurmctld.log").read_text()
    assert f"JobId={job_id} cancelled by node failure" in log
    # No process of the job survived the reboot on the node, and the node is back in service.
    assert not any(b"sleep\x003600" in cmdline for cmdline in node_cmdlines(fleet, "node-03"))
    subprocess.run(["scancel", job_id], env=fleet.slurm_env, check=False, timeout=30)
    wait_node_state(fleet, "node-03", ("IDLE", "MIXED"), 60)  # back in service (ReturnToService=2)


def test_the_specs_job_dies_with_an_ansible_reboot_of_its_node(fleet):
    """node-01's job from `up` (long running): ansible.builtin.reboot ends it, as on a real cluster."""
    job_id = next(j for j in subprocess.run(["squeue", "-h", "-w", "node-01", "-o", "%i"], capture_output=True, text=True,
                                            env=fleet.slurm_env, check=True).stdout.split())
    assert job(fleet, job_id)["JobState"] == "RUNNING"
    reboot(fleet, "node-01")
    record = wait_for(lambda: ended(fleet, job_id), 60, f"job {job_id} ended by the reboot")
    assert record["JobState"] != "RUNNING" or int(record["Restarts"]) >= 1
    subprocess.run(["scancel", job_id], env=fleet.slurm_env, check=False, timeout=30)


def test_scontrol_reboot_asap_waits_for_the_job_then_reboots(fleet):
    job_id = submit(fleet, "node-02", "sleep 8")
    boot_id = fleet.ssh_ok("node-02", "cat /proc/sys/kernel/random/boot_id")
    done = subprocess.run(["scontrol", "reboot", "ASAP", "nextstate=resume", "reason=gpusim-test", "node-02"],
                          capture_output=True, text=True, env=fleet.slurm_env, check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    time.sleep(3)
    # The job runs on; the node drains (no new job) and has not rebooted.
    assert job(fleet, job_id)["JobState"] == "RUNNING"
    assert fleet.ssh_ok("node-02", "cat /proc/sys/kernel/random/boot_id") == boot_id
    assert node_state(fleet, "node-02").startswith(("drng", "mix", "boot"))
    wait_for(lambda: job(fleet, job_id)["JobState"] == "COMPLETED", 60, f"job {job_id} completed")
    wait_for(lambda: fleet.ssh("node-02", "cat /proc/sys/kernel/random/boot_id").stdout not in ("", boot_id), 90,
             "node-02 rebooted by Slurm")
    wait_node_state(fleet, "node-02", ("IDLE",), 90)  # nextstate=resume
    assert job(fleet, job_id)["ExitCode"] == "0:0"


# --- P3: a resumed node answers as a real one does --------------------------------------------------------

def slurmctld_log_times(fleet: Fleet, pattern: str) -> list[float]:
    """Epoch seconds of the slurmctld log lines containing pattern (Slurm's own millisecond timestamps)."""
    times = []
    for line in (fleet.workdir / "slurm" / "log" / "slurmctld.log").read_text().splitlines():
        if pattern in line and line.startswith("["):
            stamp = line[1:line.index("]")]
            times.append(time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:]))
    return times


def test_a_resumed_healthy_node_answers_at_slurms_first_tick(fleet):
    """`scontrol update state=resume` marks the node NOT_RESPONDING until it answers a registration request
    (slurmctld's _require_node_reg); slurmctld sends it on its next background tick (every second) and the
    simulated node answers at once: IDLE again within 1 s of the resume, as on a real cluster."""
    for attempt in range(3):
        subprocess.run(["scontrol", "update", "nodename=node-02", "state=drain", f"reason=gpusim-p3-{attempt}"],
                       env=fleet.slurm_env, check=True, timeout=30)
        before = len(slurmctld_log_times(fleet, "Node node-02 now responding"))
        subprocess.run(["scontrol", "update", "nodename=node-02", "state=resume"], env=fleet.slurm_env, check=True, timeout=30)
        resumed = slurmctld_log_times(fleet, "update_node: node node-02 state set to IDLE")[-1]
        wait_node_state(fleet, "node-02", ("IDLE",), 10)  # no NOT_RESPONDING flag left
        answered = wait_for(lambda b=before: slurmctld_log_times(fleet, "Node node-02 now responding")[b:], 10,
                            "slurmctld logs node-02 responding")[0]
        # One background tick (1 s) plus the node's answer; the simulated node answers in milliseconds.
        assert 0 <= answered - resumed < 1.1, (resumed, answered)
        assert node_state(fleet, "node-02") == "idle"


# --- P4: a fault "after upgrade" fires when the new driver first loads, however it is activated ----------

def test_an_upgrade_fault_fires_at_an_in_place_upgrade_over_ssh(fleet):
    from gpusim import artifacts

    done = fleet_gpusim("fault", "node-03", "xid79", "gpu=1", "when=upgrade", workdir=fleet.workdir)
    assert done.returncode == 0, done.stderr
    runfile = artifacts.write_driver_runfile(fleet.node_dir("node-03") / "art", "580.95.05")
    on_node = f"/var/lib/gpusim/art/{runfile.name}"
    fleet.ssh_ok("node-03", "systemctl stop nvidia-persistenced; rmmod nvidia_drm nvidia_modeset nvidia_uvm nvidia")
    fleet.ssh_ok("node-03", f"sh {on_node} --silent --dkms")
    assert "Xid" not in fleet.ssh_ok("node-03", "dmesg")  # installed, not loaded: no upgrade yet
    fleet.ssh_ok("node-03", "modprobe nvidia")
    assert "Xid (PCI:0000:" in fleet.ssh_ok("node-03", "dmesg") and ": 79, " in fleet.ssh_ok("node-03", "dmesg")


def test_an_upgrade_fault_fires_when_a_staged_package_driver_boots(fleet):
    done = fleet_gpusim("fault", "node-01", "ecc_dbe", "gpu=3", "count=2", "when=upgrade", workdir=fleet.workdir)
    assert done.returncode == 0, done.stderr
    fleet.ssh_ok("node-01", "apt-get install -y nvidia-driver-580-open=580.95.05-1 nvidia-fabricmanager-580=580.95.05-1")
    dbe = "nvidia-smi --query-gpu=ecc.errors.uncorrected.volatile.total --format=csv,noheader -i 3"
    assert fleet.ssh_ok("node-01", dbe).strip() == "0"  # staged: the running driver is still the old one
    reboot(fleet, "node-01")
    assert "580.95.05" in fleet.ssh_ok("node-01", "cat /proc/driver/nvidia/version")
    assert fleet.ssh_ok("node-01", dbe).strip() == "2"


# --- GB200 NVL72 trays (issue 23): gpu_facts over SSH reads each tray's fabric, IMEX domain and CDMM -------------------

NVL_SPEC = TESTS / "gpusim" / "specs" / "nvl72-8.yml"


def test_gb200_trays_report_their_nvlink_domain_imex_and_cdmm(tmp_path_factory):
    """Inside each tray's namespace: nvidia-imex on its PATH, its own nodes_config.cfg, /proc/driver/nvidia/params, and
    the other trays' state for nvidia-imex-ctl -N. One tray moved to another driver + IMEX: its domain goes DOWN (!V!)."""
    from gpusim import catalog
    from gpusim import state as gstate

    with fleet_up(NVL_SPEC, tmp_path_factory.mktemp("gpusim-nvl") / "fleet", timeout=240) as workdir:
        nvl = Fleet(workdir)
        results = nvl.module("gpufleet.lifecycle.gpu_facts", "gb200_nvl72", {"gather_subset": ["driver", "gpus", "imex"]})
        assert all("ansible_facts" in result for result in results.values()), {h: r.get("msg") for h, r in results.items() if "ansible_facts" not in r}
        facts = {host: result["ansible_facts"]["gpufleet"] for host, result in results.items()}
        assert len(facts) == 8
        for host, fact in facts.items():
            domain = "rack-a" if host.startswith("nvl-a") else "rack-b"
            assert fact["nvlink"]["cluster_uuid"] == catalog.cluster_uuid(domain) and fact["nvlink"]["fabric_ok"], host
            assert fact["imex"]["domain"]["domain_up"] and fact["imex"]["problems"] == [], (host, fact["imex"])
            assert fact["cdmm"] == {"mode": "driver", "enabled": True}
            assert "fabricmanager" not in fact or not fact["fabricmanager"]["installed"]

        def other_driver(s):
            s["driver"].update(version="580.105.08", last_loaded="580.105.08")
            s["imex"]["version"] = "580.105.08"
            gstate.imex_check(s)

        gstate.update(nvl.node_dir("nvl-a02"), other_driver)
        after = nvl.module("gpufleet.lifecycle.gpu_facts", "nvl-a01,nvl-b01", {"gather_subset": ["imex"]})
        a01 = after["nvl-a01"]["ansible_facts"]["gpufleet"]["imex"]["domain"]
        assert a01["version_mismatch"] and a01["domain_state"] == "DOWN"
        assert after["nvl-b01"]["ansible_facts"]["gpufleet"]["imex"]["domain"]["domain_up"]


def test_the_stack_subset_reads_a_nodes_stack_and_reports_absent_tools(fleet):
    """gpu_facts' stack subset over SSH (issue 24): node-03 given a DOCA-OFED stack with one IB port Down and Secure Boot on,
    node-02 without one (inbox: every stack tool absent, never an error). Reuses the module's fleet: no reboot, one task."""
    from gpusim import state as gstate

    stack = {
        "ofed": {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200"},
        "ports": [{"device": "mlx5_0", "rate": 400}, {"device": "mlx5_1", "state": "Down", "physical_state": "Polling"}],
        "secure_boot": {"enabled": True, "keys": [{"sha1": "76a092065800bf376901c372cd55a90e1fded2e0", "cn": "DKMS module signing key"}]},
        "dkms": {"kernel": "6.1.0-0-old"},
    }
    gstate.update(fleet.node_dir("node-03"), lambda s: s.__setitem__("stack", stack))
    try:
        results = fleet.module("gpufleet.lifecycle.gpu_facts", "node-02,node-03", {"gather_subset": ["driver", "stack"]})
    finally:
        gstate.update(fleet.node_dir("node-03"), lambda s: s.pop("stack", None))
    assert all("ansible_facts" in r for r in results.values()), {h: r.get("msg") for h, r in results.items()}
    with_stack = results["node-03"]["ansible_facts"]["gpufleet"]["stack"]
    assert (with_stack["ofed"]["flavor"], with_stack["ofed"]["version"]) == ("doca-ofed", "24.10-1.1.4.0.200")
    assert [(p["device"], p["state"], p["rate_gbps"]) for p in with_stack["rdma"]["ports"]] == [("mlx5_0", "Active", 400), ("mlx5_1", "Down", None)]
    assert with_stack["secure_boot"]["state"] == "enabled" and len(with_stack["secure_boot"]["enrolled_keys"]) == 1
    assert with_stack["dkms"]["nvidia"]["built_for_running_kernel"] is False
    assert with_stack["modules"]["nvidia"]["loaded"] is True
    inbox = results["node-02"]["ansible_facts"]["gpufleet"]["stack"]
    assert inbox["ofed"]["flavor"] == "inbox" and inbox["rdma"]["ports"] is None and inbox["secure_boot"]["state"] is None
    assert inbox["dkms"]["installed"] is False
