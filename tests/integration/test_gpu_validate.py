"""gpu_validate on simulated nodes: healthy nodes pass at each level; each injected fault fails exactly its check.

Brings up tests/fixtures/validate/fleet-validate-9.yml with gpusim (root, sshd, namespaces), runs
playbooks that call gpufleet.lifecycle.gpu_validate over SSH and save each node's result on the
controller, and asserts on the saved results.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from fleet import REPO, TESTS, Fleet, ansible_env, fleet_up, gpusim, needs_fleet

SPEC = TESTS / "fixtures" / "validate" / "fleet-validate-9.yml"
NODES = [f"val-{i:02d}" for i in range(1, 10)]
DRIVER = "570.124.06"

pytestmark = needs_fleet(slurm=False)

# node -> (fault kind, params) injected after the baseline run
FAULTS = {
    "val-01": ("gpu_missing", {}),
    "val-02": ("xid79", {"gpu": 3}),
    "val-03": ("ecc_dbe", {"gpu": 2, "count": 2}),
    "val-04": ("fm_mismatch", {}),
    "val-05": ("dcgm_fail", {}),
    "val-06": ("nccl_low", {}),
    "val-07": ("thermal_slowdown", {"gpu": 5}),
    # val-08 stays healthy
    "val-09": ("fm_inactive", {}),
}
# what the quick level must fail on each node, exactly
QUICK_FAILS = {
    "val-01": ["gpu_count"],
    # Xid 79: the GPU fell off the bus, so nvidia-smi also reports a lost GPU
    "val-02": ["gpu_count", "xid"],
    "val-03": ["ecc"],
    "val-04": ["fabricmanager"],
    "val-05": [],
    "val-06": [],
    # a thermal straggler is hot and its clocks are slowed down
    "val-07": ["temperature", "clocks_event_reasons"],
    "val-08": [],
    "val-09": ["fabricmanager"],
}
FULL_NODES = ["val-05", "val-06", "val-07", "val-08"]
FULL_FAILS = {"val-05": ["dcgm_diag"], "val-06": ["nccl_busbw"], "val-07": ["temperature", "clocks_event_reasons"], "val-08": []}

PLAYBOOK = """
- name: gpu_validate on the simulated fleet
  hosts: "{{ targets }}"
  gather_facts: false
  tasks:
    - name: Validate
      gpufleet.lifecycle.gpu_validate:
        level: "{{ level }}"
        expected_gpu_count: 8
        expected_driver_version: "@DRIVER@"
        nccl_min_busbw_gbps: 300
        burn_seconds: 5
        # The simulated nodes run no job and no scheduler: they stand for drained nodes (the load checks need one).
        drained: true
        baseline: "{{ lookup('ansible.builtin.file', out ~ '/baseline-' ~ inventory_hostname ~ '.json') | from_json
                      if use_baseline | bool else omit }}"
        fail_on: never
      register: result
    - name: Flag stragglers
      ansible.builtin.set_fact:
        flags: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'result'))) | gpufleet.lifecycle.stragglers }}"
      run_once: true
    - name: Save the result on the controller
      check_mode: false  # also under --check, where the results are what the test reads
      ansible.builtin.copy:
        content: "{{ {'result': result, 'stragglers': flags} | to_json }}"
        dest: "{{ out }}/{{ prefix }}-{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
""".replace("@DRIVER@", DRIVER)


class ValidateFleet(Fleet):
    def __init__(self, workdir: pathlib.Path, playbook: pathlib.Path, out: pathlib.Path):
        super().__init__(workdir)
        self.playbook = playbook
        self.out = out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("gpusim-validate")
    with fleet_up(SPEC, workdir / "fleet", timeout=600, check_down=False) as fleetdir:
        out = workdir / "out"
        out.mkdir()
        (workdir / "validate.yml").write_text(PLAYBOOK)
        yield ValidateFleet(fleetdir, workdir / "validate.yml", out)


def run(fleet, prefix, level, targets, use_baseline=False, check=False):
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}", ANSIBLE_FORKS="10")
    extra = {"targets": ",".join(targets), "level": level, "out": str(fleet.out), "prefix": prefix, "use_baseline": use_baseline}
    proc = fleet.ansible_playbook(fleet.playbook, "-e", json.dumps(extra), *(["--check"] if check else []), env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    saved = {}
    for node in targets:
        saved[node] = json.loads((fleet.out / f"{prefix}-{node}.json").read_text())
    return saved


def failed(saved):
    return {node: [c["name"] for c in data["result"]["checks"] if c["status"] == "fail"] for node, data in saved.items()}


@pytest.fixture(scope="module")
def healthy(fleet):
    """Every level on the healthy fleet; the quick results become each node's baseline."""
    results = {level: run(fleet, f"healthy-{level}", level, NODES if level != "full" else FULL_NODES) for level in ("quick", "standard", "full")}
    for node, data in results["quick"].items():
        (fleet.out / f"baseline-{node}.json").write_text(json.dumps(data["result"]))
    return results


@pytest.mark.parametrize("level", ["quick", "standard", "full"])
def test_healthy_nodes_pass_at_each_level(healthy, level):
    for node, data in healthy[level].items():
        result = data["result"]
        assert result["status"] == "pass", (node, [c for c in result["checks"] if c["status"] != "pass"])
        assert result["level"] == level
    assert healthy["full"]["val-08"]["result"]["measurements"]["busbw_gbps"] > 300
    assert healthy["full"]["val-08"]["stragglers"] == []


def test_role_and_playbook_validate_the_healthy_nodes_and_write_the_report(fleet, healthy):
    """playbooks/validate.yml (the gpu_validate role, its private __gpu_validate_* facts) on healthy nodes, before any fault."""
    report_dir = fleet.out / "role-report"
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}", ANSIBLE_FORKS="10")
    extra = {"gpufleet_hosts": "val-01,val-02,val-08", "gpufleet_report_dir": str(report_dir), "gpu_validate_expected_gpu_count": 8,
             "gpu_validate_expected_driver_version": DRIVER, "gpu_validate_command_timeout": 60}
    proc = fleet.ansible_playbook(REPO / "playbooks" / "validate.yml", "-e", json.dumps(extra), env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 nodes: 3 pass" in proc.stdout
    report = json.loads(next(report_dir.glob("*.json")).read_text())
    assert sorted(node["name"] for node in report["nodes"]) == ["val-01", "val-02", "val-08"]
    assert {node["status"] for node in report["nodes"]} == {"pass"}


@pytest.fixture(scope="module")
def faulty(fleet, healthy):
    for node, (kind, params) in FAULTS.items():
        done = gpusim("fault", node, kind, *[f"{k}={v}" for k, v in params.items()], workdir=fleet.workdir)
        assert done.returncode == 0, done.stdout + done.stderr
    return {
        "quick": run(fleet, "faulty-quick", "quick", NODES, use_baseline=True),
        "full": run(fleet, "faulty-full", "full", FULL_NODES, use_baseline=True),
    }


def test_each_fact_fault_fails_exactly_its_check(faulty):
    assert failed(faulty["quick"]) == QUICK_FAILS


def test_each_load_fault_fails_exactly_its_check(faulty):
    assert failed(faulty["full"]) == FULL_FAILS


def checks_of(saved, node):
    return {c["name"]: c for c in saved[node]["result"]["checks"]}


def test_fault_observed_and_expected_values(faulty):
    quick, full = faulty["quick"], faulty["full"]
    missing = checks_of(quick, "val-01")["gpu_count"]
    assert (missing["observed"]["gpu_count"], missing["expected"]) == (7, 8)
    xid = checks_of(quick, "val-02")["xid"]
    assert xid["observed"]["critical"] == {"79": 1}
    assert "Xid 79 (GPU has fallen off the bus)" in xid["message"]
    ecc = checks_of(quick, "val-03")["ecc"]
    problems = {(p["gpu"], p["problem"]) for p in ecc["observed"]}
    assert {(2, "volatile_dbe"), (2, "remap_pending"), (2, "aggregate_dbe_growth")} <= problems
    mismatch = checks_of(quick, "val-04")["fabricmanager"]
    assert mismatch["expected"] == {"version": DRIVER, "state": "active"}
    assert mismatch["observed"]["version"] != DRIVER
    down = checks_of(quick, "val-09")["fabricmanager"]
    assert down["observed"] == {"version": DRIVER, "state": "inactive"}
    dcgm = checks_of(full, "val-05")["dcgm_diag"]
    assert dcgm["observed"]["result"] == "fail" and dcgm["expected"] == {"result": "pass", "level": 3}
    nccl = checks_of(full, "val-06")["nccl_busbw"]
    assert nccl["observed"]["busbw_gbps"] < 300 <= checks_of(full, "val-08")["nccl_busbw"]["observed"]["busbw_gbps"]
    assert nccl["expected"]["min_busbw_gbps"] == 300
    clocks = checks_of(quick, "val-07")["clocks_event_reasons"]
    assert set(clocks["observed"]["slowdown"]["5"]) >= {"hw_thermal"}


def test_thermal_straggler_and_low_bandwidth_are_flagged(faulty):
    flags = faulty["full"]["val-08"]["stragglers"]
    assert {(f["name"], f["metric"]) for f in flags} == {("val-07", "gflops_min"), ("val-06", "busbw_gbps")}


def test_role_fails_exactly_the_faulty_node_with_its_failed_check(faulty, fleet):
    """The role's verdict (its private __gpu_validate_result) fails val-01 (a GPU missing) and passes val-08."""
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}", ANSIBLE_FORKS="10")
    extra = {"gpufleet_hosts": "val-01,val-08", "gpufleet_report_dir": str(fleet.out / "role-faulty"), "gpu_validate_expected_gpu_count": 8,
             "gpu_validate_expected_driver_version": DRIVER}
    proc = fleet.ansible_playbook(REPO / "playbooks" / "validate.yml", "-e", json.dumps(extra), env=env, timeout=600)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "val-01 failed validation (quick): gpu_count: nvidia-smi sees 7 GPUs, 8 expected" in proc.stdout
    assert re.search(r"^val-01\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1\b", proc.stdout, re.MULTILINE), proc.stdout[-1500:]
    assert re.search(r"^val-08\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0\b", proc.stdout, re.MULTILINE), proc.stdout[-1500:]


def test_check_mode_runs_no_load_check_on_faulty_nodes(faulty, fleet):
    """--check at the full level: the read-only checks still find faults, the load checks are skipped (no DCGM, NCCL, burn)."""
    saved = run(fleet, "check-full", "full", ["val-05", "val-06", "val-07"], use_baseline=True, check=True)
    for node, data in saved.items():
        checks = {c["name"]: c for c in data["result"]["checks"]}
        for name in ("cuda_smoke", "dcgm_diag", "nccl_busbw", "gpu_burn"):
            assert checks[name]["status"] == "skip", (node, checks[name])
            assert checks[name]["message"] == "not run in check mode (it loads the GPUs)"
        assert data["result"]["measurements"]["busbw_gbps"] is None
    # val-05 (DCGM fault) and val-06 (low bandwidth) only show their faults under load
    assert failed(saved) == {"val-05": [], "val-06": [], "val-07": ["temperature", "clocks_event_reasons"]}


HUNG_SMI = "/var/lib/gpufleet-test-hung-nvidia-smi"


def test_a_hung_nvidia_smi_is_stopped_at_command_timeout_and_named(fleet):
    """An nvidia-smi that never answers (a wedged NVML): each read stops at command_timeout, and the result says so."""
    fleet.ssh_ok("val-08", f"printf '#!/bin/sh\\nexec sleep 600\\n' > {HUNG_SMI} && chmod 0755 {HUNG_SMI}")
    try:
        facts_args = {"nvidia_smi_path": HUNG_SMI, "command_timeout": 2, "gather_subset": ["driver", "gpus"]}
        facts = fleet.module("gpufleet.lifecycle.gpu_facts", "val-08", facts_args)["val-08"]
        assert facts.get("failed") is True
        assert facts["msg"] == "nvidia-smi did not finish within 2 s (timed out and was stopped)"
        assert facts["rc"] == 124
        validate_args = {"nvidia_smi_path": HUNG_SMI, "command_timeout": 2, "fail_on": "never", "checks": ["gpu_count", "nvlink"]}
        validate = fleet.module("gpufleet.lifecycle.gpu_validate", "val-08", validate_args)["val-08"]
        checks = {c["name"]: c for c in validate["checks"]}
        assert checks["gpu_count"]["status"] == "fail"
        assert "nvidia-smi did not finish within 2 s" in checks["gpu_count"]["message"]
        assert checks["nvlink"]["status"] == "fail"
        assert checks["nvlink"]["message"].startswith("nvidia-smi did not finish within 2 s (timed out and was stopped): raise the command_timeout option")
        # Out of range: refused before any command.
        refused = fleet.module("gpufleet.lifecycle.gpu_validate", "val-08", {"command_timeout": 0})["val-08"]
        assert refused.get("failed") is True and refused["msg"].startswith("command_timeout must be a whole number of seconds from 1 to 3600, got 0")
    finally:
        fleet.ssh_ok("val-08", f"rm -f {HUNG_SMI}")


def test_load_checks_are_refused_on_an_undrained_or_busy_node_before_any_runs(fleet):
    """standard on a node not said to be drained, and on a drained node whose GPU runs a job: refused, nothing run."""
    undrained = fleet.module("gpufleet.lifecycle.gpu_validate", "val-08", {"level": "standard", "fail_on": "never"})["val-08"]
    assert undrained.get("failed") is True, undrained
    assert "whether it is drained is not known; cuda_smoke, dcgm_diag load every GPU" in undrained["msg"]
    done = gpusim("fault", "val-09", "gpu_process", "gpu=2", "pid=31337", "name=train.py", workdir=fleet.workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    busy = fleet.module("gpufleet.lifecycle.gpu_validate", "val-09", {"level": "full", "drained": True, "fail_on": "never"})["val-09"]
    assert busy.get("failed") is True, busy
    assert "1 compute process(es) run on its GPUs (pid 31337 train.py on GPU 2)" in busy["msg"]
    assert "Nothing was run" in busy["msg"]


def test_stack_checks_pass_on_the_boms_stack_and_name_a_port_set_down(fleet):
    """ib_ports, peermem and dcgm over SSH (issue 24) on val-08 given two NDR ports and nvidia_peermem loaded: the BOM's stack
    passes; a port set Down fails ib_ports naming the port and its state, not the rate it reports. Two tasks, no reboot."""
    from gpusim import catalog as gcatalog
    from gpusim import state as gstate

    ports = [{"device": "mlx5_0", "rate": 400}, {"device": "mlx5_1", "rate": 400}]
    bom = {"rdma_ports": [{"count": 2, "link_layer": "InfiniBand", "rate": 400, "ca_type": "MT4129"}], "peermem": True, "dcgm": gcatalog.DCGM_VERSION}
    args = {"checks": ["ib_ports", "peermem", "dcgm"], "expected_stack": bom, "fail_on": "never", "command_timeout": 30}

    def give_stack(state):
        state["stack"] = {"ports": ports}
        loaded = "nvidia_peermem" in state["modules"]
        if not loaded:
            state["modules"].append("nvidia_peermem")
        return loaded

    def take_stack(state):
        state.pop("stack", None)
        if not had_peermem:
            state["modules"].remove("nvidia_peermem")

    had_peermem = gstate.update(fleet.node_dir("val-08"), give_stack)
    try:
        healthy = fleet.module("gpufleet.lifecycle.gpu_validate", "val-08", args)["val-08"]
        ports[1].update(state="Down", physical_state="Polling")
        gstate.update(fleet.node_dir("val-08"), lambda state: state["stack"].__setitem__("ports", ports))
        down = fleet.module("gpufleet.lifecycle.gpu_validate", "val-08", args)["val-08"]
    finally:
        gstate.update(fleet.node_dir("val-08"), take_stack)
    assert {c["name"]: c["status"] for c in healthy["checks"]} == {"ib_ports": "pass", "peermem": "pass", "dcgm": "pass"}, healthy["checks"]
    assert healthy["status"] == "pass"
    checks = {c["name"]: c for c in down["checks"]}
    assert down["status"] == "fail" and down["failed_checks"] == ["ib_ports"]
    assert checks["ib_ports"]["message"].startswith("mlx5_1/1 is Down/Polling, not Active/LinkUp"), checks["ib_ports"]["message"]
    assert "10 Gb/s" not in checks["ib_ports"]["message"]  # ibstat's Rate: 10 of a Down port is no rate it runs at
    assert checks["ib_ports"]["observed"]["ports"] == {"mlx5_0/1": "Active/LinkUp 400 Gb/s", "mlx5_1/1": "Down/Polling"}
