"""playbooks/upgrade.yml run by ansible-runner the way AWX runs a job, as two job slices of one rollout at once, on
one simulated fleet (tests/fixtures/awx/fleet-slices.yml: 6 L40S nodes, 127.0.32.x, slurmctld on 19200).

Each slice is an AWX job: a private data dir as AWX writes it (project/, inventory/, env/extravars, env/envvars),
then `ansible_runner.run(...)`. AWX's sliced job gives each slice every other host of the inventory and the same extra
vars (one rollout id, the whole fleet as gpufleet_capacity_pool) and runs the slices at once. The sliced inventory
has no slurm_clients group (AWX would put the Slurm client into one slice only): each node runs its own scontrol, as
compute nodes of a Slurm cluster can.

* each job succeeds; its evidence lands in its artifacts (gpufleet_report_dir from AWX_ISOLATED_DATA_DIR, which
  ansible-runner sets to artifacts/<ident>); its events carry the rollout's progress lines (role rollout,
  batch_start.yml: "rollout <id>: canary (...)", "wave N of M", "admitted: ...");
* Slurm's own node states, sampled during the run (rollout_helpers.Sampler), never show more pool nodes out than
  gpufleet_max_unavailable (2) although the slices admit at the same moments; every node is upgraded, none is left
  drained. Before slurm_capacity's drain_admitted (the Slurm-side admission mutex) two slices both read "0 out of
  a budget of 1" and both drained: this test sampled gpu-03 and gpu-04 out at once.

ansible-runner is a development dependency (requirements-dev.txt); without it the file is skipped.
Run:
    .venv/bin/python -m pytest tests/integration/test_awx_runner.py -m integration -q
"""

from __future__ import annotations

import json
import os
import pathlib
import threading

import pytest
import yaml
from fleet import REPO, TESTS, fleet_up, needs_fleet
from rollout_helpers import NEW, OLD, RolloutFleet, by_time, max_unavailable, unavailable, write_runfiles

ansible_runner = pytest.importorskip("ansible_runner", reason="ansible-runner is not installed (requirements-dev.txt pins it)")

SPEC = TESTS / "fixtures" / "awx" / "fleet-slices.yml"
POOL = ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06"]
BUDGET = 2
ROLLOUT = "awx-sliced-1"
# What an AWX user sets so that the evidence is in the job's artifacts (ansible-runner sets AWX_ISOLATED_DATA_DIR to
# artifacts/<ident>; in AWX, point gpufleet_report_dir at a volume that outlives the job: docs/awx.md).
REPORT_DIR = "{{ lookup('ansible.builtin.env', 'AWX_ISOLATED_DATA_DIR') }}/gpufleet"

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("awx-slices")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


def envvars() -> dict[str, str]:
    """env/envvars of the job: what the EE provides (the collection, ansible-core on PATH) and AWX's settings.

    SSH pipelining on, as the other rollout tests run (fleet.ansible_env: a module in one SSH round trip instead of
    four; an EE sets it in its ansible.cfg or the job template's environment). The path without it stays tested by
    test_nvidia_driver.py."""
    return {
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_COLLECTIONS_PATH": f"{REPO / '.collections'}:{REPO / '.venv' / 'lib' / 'python3.11' / 'site-packages'}",
        "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def private_data_dir(root: pathlib.Path, inventory: dict, extravars: dict) -> pathlib.Path:
    """A private data dir as AWX writes one: project/ (the project checkout), inventory/, env/extravars, env/envvars."""
    root.mkdir(parents=True)
    (root / "project").symlink_to(REPO, target_is_directory=True)
    (root / "inventory").mkdir()
    (root / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (root / "env").mkdir()
    (root / "env" / "extravars").write_text(yaml.safe_dump(extravars, sort_keys=False))
    (root / "env" / "envvars").write_text(yaml.safe_dump(envvars(), sort_keys=False))
    return root


def fleet_inventory(fleet: RolloutFleet, hosts: list[str], slurm_client: bool) -> dict:
    """The fleet's inventory (gpusim wrote it) with only `hosts` of the GPU nodes, and the Slurm client or not."""
    full = yaml.safe_load(fleet.inventory.read_text())
    out = {"all": {"vars": full["all"]["vars"], "children": {}}}
    skus = {}
    for sku, group in full["all"]["children"]["gpu_nodes"]["children"].items():
        kept = {h: v for h, v in group["hosts"].items() if h in hosts}
        if kept:
            skus[sku] = {"hosts": kept}
    out["all"]["children"]["gpu_nodes"] = {"children": skus}
    out["all"]["children"]["gpu"] = {"children": {"gpu_nodes": {}}}
    if slurm_client:
        out["all"]["children"]["slurm_clients"] = full["all"]["children"]["slurm_clients"]
    # The SKUs' BOMs (inventory/group_vars of the fleet) as group vars of the SKU groups.
    for sku, group in skus.items():
        group["vars"] = yaml.safe_load((fleet.inventory.parent / "group_vars" / f"{sku}.yml").read_text())
    return out


def job_vars(fleet: RolloutFleet, **extra) -> dict:
    """The job template's extra vars and survey answers (scaled timing for the simulator), the report in the artifacts."""
    return {**fleet.extra_vars(pathlib.Path("unused"), gpufleet_report_dir=REPORT_DIR), **extra}


def run_job(pdd: pathlib.Path, ident: str) -> ansible_runner.Runner:
    return ansible_runner.run(private_data_dir=str(pdd), playbook="playbooks/upgrade.yml", inventory=str(pdd / "inventory"),
                              ident=ident, forks=16, quiet=True, timeout=1200)


def messages(runner: ansible_runner.Runner) -> list[str]:
    """The msg of every debug result among the job's events (what AWX shows in the job output)."""
    out = []
    for event in runner.events:
        res = (event.get("event_data") or {}).get("res") or {}
        if event.get("event") == "runner_on_ok" and isinstance(res.get("msg"), str):
            out.append(res["msg"])
    return out


@pytest.fixture(scope="module")
def sliced(fleet, tmp_path_factory):
    """Two slices of one rollout at once (AWX: job_slice_count 2), Slurm's states sampled meanwhile."""
    base = tmp_path_factory.mktemp("awx-slices")
    # A slice may wait for the other's wave to finish: the wait for capacity is generous (a loaded 2-core machine).
    extravars = job_vars(fleet, gpufleet_rollout_id=ROLLOUT, gpufleet_max_unavailable=BUDGET, gpufleet_waves=[2],
                         gpufleet_capacity_pool=POOL, gpufleet_capacity_wait_seconds=900,
                         gpufleet_slurm_environment={"SLURM_CONF": fleet.slurm_env["SLURM_CONF"]})
    slices = {n: POOL[n - 1::2] for n in (1, 2)}
    pdds = {n: private_data_dir(base / f"slice-{n}", fleet_inventory(fleet, hosts, slurm_client=False), extravars)
            for n, hosts in slices.items()}
    sampler = fleet.sampler(base / "slurm-states.jsonl")
    runners: dict[int, ansible_runner.Runner] = {}
    threads = [threading.Thread(target=lambda n=n: runners.__setitem__(n, run_job(pdds[n], f"slice-{n}"))) for n in slices]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=1260)
    return {"runners": runners, "slices": slices, "samples": sampler.stop(),
            "artifacts": {n: pdds[n] / "artifacts" / f"slice-{n}" for n in slices}}


def stdout_tail(runner: ansible_runner.Runner) -> str:
    return runner.stdout.read()[-6000:]


def test_both_slices_succeed(sliced):
    for n, runner in sliced["runners"].items():
        assert runner.status == "successful" and runner.rc == 0, f"slice {n}:\n{stdout_tail(runner)}"


def test_the_evidence_is_in_each_jobs_artifacts(sliced):
    for n, hosts in sliced["slices"].items():
        report = sliced["artifacts"][n] / "gpufleet"
        for name in ("rollout-report.json", "rollout-report.md", "rollout-report.html", "rollout-junit.xml"):
            assert (report / name).is_file(), f"slice {n}: {name} missing from {report}: {sorted(p.name for p in report.glob('*'))}"
        assert ROLLOUT in (report / "rollout-report.md").read_text()
        assert sorted(p.stem for p in (report / "nodes").glob("*.json")) == hosts
        for host in hosts:
            record = json.loads((report / "nodes" / f"{host}.json").read_text())
            assert record["rollout_id"] == ROLLOUT and record["result"] == "upgraded", record


def test_the_job_events_show_the_rollouts_progress(sliced):
    for n, runner in sliced["runners"].items():
        shown = messages(runner)
        assert any(m.startswith(f"rollout {ROLLOUT}: canary (") for m in shown), (n, shown)
        assert any(m.startswith(f"rollout {ROLLOUT}: wave 1 of 1 (") for m in shown), (n, shown)
        assert any(m.startswith("admitted: ") for m in shown), (n, shown)
        # The events are what AWX streams from: each names its task.
        starts = [e for e in runner.events if e.get("event") == "playbook_on_task_start"]
        assert any(e["event_data"].get("task") == "Show where the rollout is" for e in starts), n


def test_slices_never_take_more_than_the_budget_out_in_slurms_states(sliced):
    assert len(sliced["samples"]) > 0
    worst, when, nodes = max_unavailable(sliced["samples"], POOL)
    assert worst <= BUDGET, f"{worst} pool nodes out of service at {when}: {nodes} (gpufleet_max_unavailable {BUDGET}, two slices)"
    # The slices did run at once: nodes of both slices were out of service in one sample.
    together = [t for t, nodes in by_time(sliced["samples"]).items()
                if all(any(n in nodes and unavailable(nodes[n]["state"]) for n in hosts) for hosts in sliced["slices"].values())]
    assert together, "the two slices never had a node out at the same time: they did not run at once"


def test_slices_upgrade_every_node_and_leave_none_drained(fleet, sliced):
    for name in POOL:
        assert fleet.driver(name) == NEW, name
        state = fleet.node(name)
        assert not unavailable(state["state"]), (name, state)


def test_the_artifacts_hold_no_secret(fleet, sliced):
    password = yaml.safe_load(fleet.inventory.read_text())["all"]["vars"]["bmc_password"]
    for artifacts in sliced["artifacts"].values():
        for path in artifacts.rglob("*"):
            if path.is_file():
                assert password not in path.read_text(errors="replace"), path
