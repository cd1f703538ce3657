"""Every module of the collection under Mitogen's mitogen_linear strategy, as under Ansible's own linear one.

One playbook calls each module of the collection (the test fails when plugins/modules holds one it does not call),
read-only or in check mode, on a 2-node simulated fleet (127.0.122.x,
BMCs on 127.0.222.x, slurmctld on 16500): gpu_facts, gpu_validate, node_state, rollout_state, nvidia_driver, mlxfw,
nvfwupd (query, from the controller), slurm_node and slurm_capacity (delegated to the Slurm client), fleet_report,
bmc_inventory, validation_report and rollout_report (on the controller). It runs once with strategy linear and once with mitogen_linear;
every task must succeed under both, with the same changed flags and the same facts (driver, GPU count, the NICs).
Needs root, the simulator's packages and Mitogen for Ansible (`pip install mitogen`, 0.3.54 supports ansible-core 2.19:
it skips with that reason without it); nvfwupd needs ../shared/tools/open-nvfwupd (the test skips without it). Run:
    .venv/bin/python -m pytest tests/integration/test_mitogen.py -m integration -q
"""

from __future__ import annotations

import base64
import importlib.util
import json
import pathlib

import pytest
import yaml
from fleet import ANSIBLE_PLAYBOOK, TESTS, ansible_env, fleet_up, json_doc, needs_fleet, run
from fleet import Fleet as BaseFleet
from gpusim import artifacts, opennvfwupd
from rollout_helpers import NEW, OLD, RolloutFleet, write_runfiles

pytestmark = needs_fleet()

SPEC = {
    "fleet": {"name": "mitogen-2", "loopback": 122, "slurm_port": 16500},
    "timing": {"reboot": 1, "flash": 1, "diag": 0.2, "burn": 0.2, "nccl": 0.2},
    "skus": {
        "hgx_h100": {
            "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True, "cpus": 8,
            "nics": [{"type": "ConnectX-7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax", "fw": "28.43.1014", "count": 2}],
            "bom": {"driver": {"version": OLD, "install": "runfile", "kernel_module": "open"}, "fabricmanager": OLD,
                    "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 8}, "nic_firmware": {"MT_0000000834": "28.43.1014"},
                    "cuda": ["12.4"]},
        }
    },
    "nodes": [{"count": 2, "prefix": "mito-", "sku": "hgx_h100", "driver": OLD, "kernel_module": "open"}],
}
MODULES = ("bmc_inventory", "fleet_report", "gpu_facts", "gpu_validate", "mlxfw", "node_state", "nvfwupd", "nvidia_driver", "ofed", "rollout_report",
           "rollout_state", "slurm_capacity", "slurm_node", "validation_report")
CONTROLLER = ("bmc_inventory", "fleet_report", "rollout_report", "validation_report")  # run once, on localhost

PLAYBOOK = """
- name: Every module on the nodes, read-only or in check mode
  hosts: gpu_nodes
  gather_facts: false
  vars:
    slurm_client: "{{ groups['slurm_clients'][0] }}"
  tasks:
    - name: gpu_facts
      gpufleet.lifecycle.gpu_facts:
    - name: gpu_validate
      gpufleet.lifecycle.gpu_validate:
        level: quick
        expected_gpu_count: 8
        expected_driver_version: "{{ old }}"
      check_mode: true
      register: validate
    - name: node_state
      gpufleet.lifecycle.node_state:
    - name: rollout_state read
      gpufleet.lifecycle.rollout_state:
        rollout_id: mitogen-it
        action: read
    - name: rollout_state acquire
      gpufleet.lifecycle.rollout_state:
        rollout_id: mitogen-it
        action: acquire
        owner: test_mitogen
        wave: 1
      check_mode: true
    - name: nvidia_driver
      gpufleet.lifecycle.nvidia_driver:
        version: "{{ old }}"
        method: runfile
        source: "{{ runfile.source }}"
        checksum: "{{ runfile.checksum }}"
        kernel_module: open
      check_mode: true
    - name: mlxfw
      gpufleet.lifecycle.mlxfw:
        image: "{{ nic_image.image }}"
        checksum: "{{ nic_image.checksum }}"
      check_mode: true
    - name: ofed
      gpufleet.lifecycle.ofed:
        flavor: doca-ofed
        version: 24.10-1.1.4.0.200
        method: package
        peermem: skip
      check_mode: true
    - name: nvfwupd
      gpufleet.lifecycle.nvfwupd:
        state: query
        bmc:
          address: "{{ bmc_address }}"
          user: "{{ bmc_user }}"
          password: "{{ bmc_password }}"
          port: "{{ bmc_port }}"
          ca_path: "{{ gpufleet_bmc_ca_path }}"
        nvfwupd_path: "{{ nvfwupd_path }}"
        nvfwupd_interpreter: "{{ nvfwupd_interpreter }}"
      delegate_to: localhost
    - name: slurm_node
      gpufleet.lifecycle.slurm_node:
        node: "{{ inventory_hostname }}"
        state: drained
        reason: test_mitogen check mode
        rollout_id: mitogen-it
      check_mode: true
      delegate_to: "{{ slurm_client }}"
      environment: "{{ hostvars[slurm_client].gpufleet_slurm_environment }}"
    - name: slurm_capacity
      gpufleet.lifecycle.slurm_capacity:
        pool: "{{ ansible_play_hosts_all }}"
        max_unavailable: 1
        admit: ["{{ inventory_hostname }}"]
        rollout_id: mitogen-it
      check_mode: true
      delegate_to: "{{ slurm_client }}"
      environment: "{{ hostvars[slurm_client].gpufleet_slurm_environment }}"
    - name: The process that runs the modules
      # Under Mitogen a module runs in its persistent interpreter, python3(mitogen:user@host:pid); under linear in AnsiballZ.
      ansible.builtin.slurp:
        src: /proc/self/cmdline
      register: runner
    - name: Keep the audit record
      ansible.builtin.set_fact:
        audit_record: {name: "{{ inventory_hostname }}", sku: "{{ gpufleet_sku }}", bom: "{{ gpufleet_bom }}", facts: "{{ ansible_facts.gpufleet }}"}
        validation_record: {name: "{{ inventory_hostname }}", result: "{{ validate }}"}

- name: The reports, on the controller
  hosts: localhost
  gather_facts: false
  tasks:
    - name: bmc_inventory
      gpufleet.lifecycle.bmc_inventory:
        bmcs: "{{ groups['gpu_nodes'] | map('extract', hostvars) | gpufleet.lifecycle.bmc_endpoints }}"
        validate_certs: false
      register: bmc
    - name: fleet_report
      gpufleet.lifecycle.fleet_report:
        bmc_inventories: "{{ bmc.inventories }}"
        nodes: "{{ groups['gpu_nodes'] | map('extract', hostvars, 'audit_record') | list }}"
        expected_hosts: "{{ groups['gpu_nodes'] }}"
        dest: "{{ report_dir }}/fleet"
    - name: validation_report
      gpufleet.lifecycle.validation_report:
        nodes: "{{ groups['gpu_nodes'] | map('extract', hostvars, 'validation_record') | list }}"
        expected_hosts: "{{ groups['gpu_nodes'] }}"
        dest: "{{ report_dir }}/validation"
    - name: rollout_report
      gpufleet.lifecycle.rollout_report:
        rollout_id: mitogen-it
        records: []
        dest: "{{ report_dir }}/rollout"
"""


def mitogen_strategy_dir() -> pathlib.Path | None:
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        return None
    return pathlib.Path(spec.origin).parent / "plugins" / "strategy"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    strategy_dir = mitogen_strategy_dir()
    if strategy_dir is None:
        pytest.skip("Mitogen for Ansible is not installed (pip install mitogen==0.3.54, which supports ansible-core 2.19)")
    missing = opennvfwupd.unavailable()
    if missing:
        pytest.skip(missing)
    opennvfwupd.ensure()
    base = tmp_path_factory.mktemp("mitogen")
    (base / "spec.yml").write_text(yaml.safe_dump(SPEC))
    runfiles = write_runfiles(base / "runfiles", (OLD,))
    image = artifacts.write_mlx_image(base / "images", "MT_0000000834", "28.43.1014")
    (base / "play.yml").write_text(PLAYBOOK)
    extra = {"old": OLD, "runfile": runfiles[OLD], "nic_image": {"image": str(image), "checksum": "sha256:" + artifacts.sha256_file(image)},
             "nvfwupd_path": str(opennvfwupd.SOURCE / "nvfwupd.py"), "nvfwupd_interpreter": str(opennvfwupd.python())}
    with fleet_up(base / "spec.yml", base / "fleet", timeout=300) as workdir:
        yield {"fleet": BaseFleet(workdir), "base": base, "extra": extra, "strategy_dir": strategy_dir}


def play(fleet, strategy: str) -> dict:
    """{task name: {host: result}} of the playbook under `strategy`."""
    report_dir = fleet["base"] / f"reports-{strategy}"
    # A loaded CI machine can take more than Ansible's default 10 s to open a connection (Mitogen bootstraps Python over it).
    env = ansible_env(json_output=True, ANSIBLE_STRATEGY=strategy, ANSIBLE_STRATEGY_PLUGINS=str(fleet["strategy_dir"]), ANSIBLE_TIMEOUT="60")
    cmd = [str(ANSIBLE_PLAYBOOK), "-i", str(fleet["fleet"].inventory), str(fleet["base"] / "play.yml"), "-f", "4",
           "-e", json.dumps({**fleet["extra"], "report_dir": str(report_dir)})]
    doc = json_doc(run(cmd, env=env, timeout=600))
    tasks: dict[str, dict] = {}
    for p in doc["plays"]:
        for task in p["tasks"]:  # a task can come in several entries (one per host batch): their hosts together
            tasks.setdefault(task["task"]["name"], {}).update(task["hosts"])
    return tasks


@pytest.fixture(scope="module")
def runs(fleet):
    return {strategy: play(fleet, strategy) for strategy in ("linear", "mitogen_linear")}


def test_the_playbook_calls_every_module(runs):
    assert set(MODULES) == {path.stem for path in (TESTS.parent / "plugins" / "modules").glob("*.py")}
    assert set(MODULES) <= {name.split()[0] for name in runs["linear"]}
    for strategy, tasks in runs.items():
        ran = {module: sorted({h for name, hosts in tasks.items() if name.split()[0] == module for h, r in hosts.items() if not r.get("skipped")})
               for module in MODULES}
        assert ran == {module: ["localhost"] if module in CONTROLLER else ["mito-01", "mito-02"] for module in MODULES}, strategy


@pytest.mark.parametrize("strategy", ["linear", "mitogen_linear"])
def test_every_module_succeeds(runs, strategy):
    failed = {(task, host): result.get("msg") for task, hosts in runs[strategy].items() for host, result in hosts.items()
              if result.get("failed") or result.get("unreachable")}
    assert failed == {}


def test_mitogen_gives_the_same_answers_as_linear(runs):
    linear, mitogen = runs["linear"], runs["mitogen_linear"]
    assert sorted(mitogen) == sorted(linear)
    for task, hosts in linear.items():
        assert {h: bool(r.get("changed")) for h, r in mitogen[task].items()} == {h: bool(r.get("changed")) for h, r in hosts.items()}, task
    for host, result in linear["gpu_facts"].items():
        facts, under_mitogen = result["ansible_facts"]["gpufleet"], mitogen["gpu_facts"][host]["ansible_facts"]["gpufleet"]
        for key in ("driver", "gpu_count", "nics", "fabricmanager", "nvswitch"):
            assert under_mitogen[key] == facts[key], (host, key)
    for host, result in linear["gpu_validate"].items():
        assert [(c["name"], c["status"]) for c in mitogen["gpu_validate"][host]["checks"]] == [(c["name"], c["status"]) for c in result["checks"]]
    bmc = {strategy: runs[strategy]["bmc_inventory"]["localhost"] for strategy in runs}
    assert bmc["linear"]["summary"]["errors"] == [] and bmc["mitogen_linear"]["summary"]["errors"] == []
    assert {h: r["entries"] for h, r in bmc["mitogen_linear"]["inventories"].items()} == {h: r["entries"] for h, r in bmc["linear"]["inventories"].items()}
    assert sorted(bmc["linear"]["inventories"]) == ["mito-01", "mito-02"]


def test_mitogen_really_ran_the_modules(runs):
    """Each module ran in Mitogen's interpreter on the node under mitogen_linear (no silent fallback), in AnsiballZ under linear."""
    runner = "The process that runs the modules"
    under = {strategy: {h: b"(mitogen:" in base64.b64decode(r["content"]) for h, r in runs[strategy][runner].items()} for strategy in runs}
    assert under == {"linear": {"mito-01": False, "mito-02": False}, "mitogen_linear": {"mito-01": True, "mito-02": True}}


def test_the_rollout_stops_under_mitogen_before_touching_a_node(fleet, tmp_path):
    """Under mitogen_linear an async job of a collection module never finishes (Mitogen 0.3.54: the forked job hangs
    importing the collection's module_utils; docs/performance.md). The rollout's drains and installs are async jobs:
    upgrade.yml checks async once in its preflight and stops there, naming the strategy, with no node drained or
    locked, instead of waiting out every drain's async limit (420 s a batch, measured) and skipping every node."""
    rollout = RolloutFleet(fleet["fleet"].workdir, write_runfiles(tmp_path / "runfiles"))
    before = {name: rollout.state_file(name) for name in ("mito-01", "mito-02")}
    # A BOM the preflight accepts (the spec's own, OLD, is a branch past its end of life): without the check the
    # rollout would go on to drain the nodes.
    bom = {**SPEC["skus"]["hgx_h100"]["bom"], "driver": {"version": NEW, "install": "runfile", "kernel_module": "open"}, "fabricmanager": NEW}
    env = ansible_env(ANSIBLE_STRATEGY="mitogen_linear", ANSIBLE_STRATEGY_PLUGINS=str(fleet["strategy_dir"]), ANSIBLE_TIMEOUT="60")
    done = run(rollout.upgrade_cmd(tmp_path / "report", forks=4, gpufleet_bom=bom), env=env, timeout=600)
    assert done.returncode != 0, done.stdout[-4000:]
    text = " ".join(done.stdout.split())
    assert "did not finish in 20 s" in text and "run the rollout with strategy linear" in text, done.stdout[-4000:]
    assert "Drain the node" not in done.stdout, done.stdout[-4000:]
    for name in ("mito-01", "mito-02"):
        assert "DRAIN" not in rollout.node(name)["state"], name
        assert rollout.state_file(name) == before[name], name  # no lock, no phase, no history entry
