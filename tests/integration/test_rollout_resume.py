"""playbooks/upgrade.yml interrupted and resumed, and its lock, on 8 simulated nodes over real SSH and real Slurm.

The fleet (tests/fixtures/rollout/fleet-resume.yml, 127.0.27.x, slurmctld on 18700). While a rollout runs, a second
rollout (another id) over the same nodes refuses before it touches any, naming the owner and the age of the lock, and
so does a second run of the same rollout (the same id: another operator, an AWX job). The first rollout's
ansible-playbook is then killed (SIGKILL) while a wave is in flight; run again at once it is refused as a twin (the
killed run's heartbeat is fresh), run with a gpufleet_lock_stale_seconds under the lock's age it takes the nodes over,
resumes and completes, and writes every file of evidence with each node's record whole (the canary, finished by the
killed run, keeps the versions it ran before, from its state file); a third run changes nothing. Then a new BOM with the
stop switch: the stop file (gpufleet_stop_file) put down while the canary is in flight finishes the nodes in flight,
starts no new node, says how to resume and writes its evidence; with the file gone, the same command completes the
rollout, a node whose GPU falls off the bus on the new driver rolled back. Run once more into an empty evidence folder (an
AWX job's fresh project folder), it changes nothing and writes every record whole from the node state files, the
rollback's details included (issue 22: it wrote no evidence at all). Last, on its own fleet of GB200 NVL72 trays
(tests/fixtures/rollout/fleet-units-nvl72.yml: 2 NVLink domains of 4 trays, 127.0.28.x, slurmctld on 18800), a rollout
without gpufleet_unit_by is refused before any tray is touched; with gpufleet_unit_by: nvlink_domain each domain goes out
of service and comes back whole, the unit's IMEX domain check (UP with every tray) passes on the upgraded domain,
one tray losing a GPU after its upgrade rolls its whole domain back (no domain ever in service on two drivers), and the
other domain is upgraded.
Run:
    .venv/bin/python -m pytest tests/integration/test_rollout_resume.py -m integration -q
"""

from __future__ import annotations

import json
import time

import pytest
from fleet import TESTS, fleet_up, needs_fleet
from rollout_helpers import NEW, OLD, RolloutFleet, by_time, failures, recap, report_json, unavailable, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-resume.yml"
NVL72_SPEC = TESTS / "fixtures" / "rollout" / "fleet-units-nvl72.yml"
SHAPE = {"gpufleet_max_unavailable": 2, "gpufleet_waves": [2], "gpufleet_soak_seconds": 2}
NEWER = "595.45.04"
TRAY_OLD, TRAY_NEW = "580.95.05", "590.48.01"  # the NVL72 trays' driver, and the gpufleet_unit_by rollout's BOM
BOM_NEWER = {"driver": {"version": NEWER, "install": "runfile", "kernel_module": "open"}, "gpu": {"model": "NVIDIA L40S", "count": 2},
             "cuda": ["12.4"]}

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-resume")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW, NEWER))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


def wait_for(what, check, timeout: float, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the rollout ended (rc {proc.returncode}) before {what}")
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def ours_draining(fleet, names):
    """The nodes among names that Slurm shows drained with a gpufleet reason (one scontrol call for all of them)."""
    nodes = fleet.nodes()
    return [n for n in names if n in nodes and "DRAIN" in nodes[n]["state"] and nodes[n]["reason"].startswith("gpufleet:")]


@pytest.fixture(scope="module")
def interrupted(fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume")
    report = out / "report"
    proc = fleet.start_upgrade(report, out / "first.log", **SHAPE)
    try:
        # The canary is drained: the rollout holds every target now.
        canary = wait_for("the canary's drain", lambda: ours_draining(fleet, fleet.names), 240, proc)[0]
        rollout_id = fleet.rollout_section(canary)["id"]
        second = fleet.upgrade(out / "second", gpufleet_rollout_id="r-second", **SHAPE)
        twin = fleet.upgrade(out / "twin", **SHAPE)  # the same BOM, so the same rollout id: another run of it
        # Then a wave node is drained (in flight): kill the playbook there.
        wave_node = wait_for("a wave node's drain", lambda: ours_draining(fleet, [n for n in fleet.names if n != canary]), 300, proc)[0]
        fleet.kill(proc)
    finally:
        if proc.poll() is None:
            fleet.kill(proc)
    killed_states = {n: fleet.rollout_section(n) for n in fleet.names}
    too_soon = fleet.upgrade(out / "too-soon", **SHAPE)  # the killed run's heartbeat is fresh: it could still be alive
    time.sleep(3)
    resumed = fleet.upgrade(report, gpufleet_lock_stale_seconds=2, **SHAPE)  # the operator says: that run is gone
    resumed_report = evidence(report)
    third = fleet.upgrade(report, **SHAPE)
    return {"id": rollout_id, "canary": canary, "second": second, "twin": twin, "wave_node": wave_node, "killed": killed_states,
            "too_soon": too_soon, "resumed": resumed, "third": third, "first_log": (out / "first.log").read_text(),
            "resumed_report": resumed_report, "third_report": evidence(report)}


EVIDENCE = ("rollout-report.json", "rollout-report.md", "rollout-report.html", "rollout-junit.xml")


def evidence(report_dir):
    """What a run left in its evidence folder: the report (None when it wrote none) and each node's JSON file."""
    if not (report_dir / "rollout-report.json").exists():
        return {"report": None, "files": [], "nodes": {}}
    return {"report": report_json(report_dir), "files": sorted(p.name for p in report_dir.iterdir() if p.is_file()),
            "nodes": {p.stem: json.loads(p.read_text()) for p in (report_dir / "nodes").glob("*.json")}}


def assert_evidence_whole(fleet, found, rollout_id, sections=None):
    """Every file of evidence, a JSON file per node, each node's record with its result and phases from its state file
    (``sections``: each node's rollout section when the run ended; read now when not given)."""
    assert found["report"] is not None, "the run wrote no evidence"
    assert set(EVIDENCE) <= set(found["files"]), found["files"]
    assert sorted(found["nodes"]) == sorted(fleet.names), sorted(found["nodes"])
    for name, record in found["nodes"].items():
        assert record["rollout_id"] == rollout_id, record
        section = sections[name] if sections else fleet.rollout_section(name)
        if section.get("id") == rollout_id:
            assert record["result"] == (section["result"] if section["status"] == "done" else "not_started"), (record, section)
            assert [p["name"] for p in record["phases"]] == [p["name"] for p in section["phases"]], (record, section)


def test_a_second_rollout_refuses_naming_the_owner_and_age(fleet, interrupted):
    second = interrupted["second"]
    assert second.returncode != 0
    assert "rollout r-second refuses to start" in second.stdout, second.stdout[-4000:]
    assert f"held by rollout {interrupted['id']}" in second.stdout and " age " in second.stdout, second.stdout[-4000:]
    assert "No node was touched" in second.stdout
    # Its lock was never taken on any node: every section still names the first rollout.
    for name, section in interrupted["killed"].items():
        assert section.get("id") == interrupted["id"], (name, section)


@pytest.mark.parametrize("run", ["twin", "too_soon"])
def test_a_second_run_of_the_same_rollout_refuses_while_the_first_may_live(interrupted, run):
    refused = interrupted[run]
    assert refused.returncode != 0
    assert f"rollout {interrupted['id']} refuses to start" in refused.stdout, refused.stdout[-4000:]
    assert f"held by another run of the same rollout {interrupted['id']}" in refused.stdout, refused.stdout[-4000:]
    assert "gpufleet_lock_stale_seconds" in refused.stdout and "No node was touched" in refused.stdout
    # Its nonce was never recorded: every node still names the first run's.
    runs = {section.get("run") for section in interrupted["killed"].values()}
    assert len(runs) == 1 and None not in runs, interrupted["killed"]


def test_the_killed_rollout_left_a_wave_in_flight(interrupted):
    section = interrupted["killed"][interrupted["wave_node"]]
    assert section["status"] == "running", section
    assert "rollout" in interrupted["first_log"]


def assert_completed(fleet, run, driver, rollout_id=None):
    """The run succeeded: every node on `driver`, finished upgraded (by rollout_id, when given), back in service."""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    for name in fleet.names:
        assert fleet.driver(name) == driver, name
        section = fleet.rollout_section(name)
        assert (section["status"], section["result"]) == ("done", "upgraded"), (name, section)
        assert rollout_id is None or section["id"] == rollout_id, (name, section)
        assert "DRAIN" not in fleet.node(name)["state"], name


def test_run_again_it_completes(fleet, interrupted):
    assert_completed(fleet, interrupted["resumed"], NEW, interrupted["id"])
    output = " ".join((interrupted["resumed"].stdout + interrupted["resumed"].stderr).split())  # warnings: stderr, wrapped
    assert "took over node" in output and "its heartbeat is stale" in output, output[-4000:]


def test_the_resumed_run_writes_every_record_whole(fleet, interrupted):
    """The canary was finished by the killed run, which wrote no evidence: its record comes whole from its state file,
    with the driver it ran before the rollout (the resumed run reads it on the new one) and after."""
    for found in (interrupted["resumed_report"], interrupted["third_report"]):
        assert_evidence_whole(fleet, found, interrupted["id"])
        canary = found["nodes"][interrupted["canary"]]
        assert (canary["result"], canary["wave"]) == ("upgraded", 0), canary
        assert (canary["before"]["driver"], canary["after"]["driver"]) == (OLD, NEW), canary
        assert {"drain", "driver", "validate", "resume"} <= {p["name"] for p in canary["phases"]}, canary["phases"]


def test_a_third_run_changes_nothing(interrupted):
    third = interrupted["third"]
    assert third.returncode == 0, third.stdout[-6000:]
    changed = {host: counts["changed"] for host, counts in recap(third.stdout).items()}
    assert changed and set(changed.values()) == {0}, changed


@pytest.fixture(scope="module")
def stopped(fleet, interrupted, tmp_path_factory):
    """A rollout to NEWER; the stop file is put down once the canary is drained; then removed and the command rerun, a
    node not started yet losing a GPU on the new driver (rolled back); then run once more into an empty evidence folder."""
    out = tmp_path_factory.mktemp("stop")
    stop = fleet.workdir / "gpufleet.stop"  # the tests' gpufleet_stop_file (RolloutFleet.extra_vars)
    proc = fleet.start_upgrade(out / "report", out / "stop.log", gpufleet_bom=BOM_NEWER, **SHAPE)
    try:
        canary = wait_for("the canary's drain", lambda: ours_draining(fleet, fleet.names), 240, proc)[0]
        stop.write_text("the maintenance window is over\n")
        proc.wait(timeout=1200)
    finally:
        if proc.poll() is None:
            fleet.kill(proc)
    stopped_at = {n: (fleet.driver(n), fleet.node(n), fleet.rollout_section(n)) for n in fleet.names}
    stopped_evidence = evidence(out / "report")
    stop.unlink()
    faulty = sorted(n for n, (driver, _node, _section) in stopped_at.items() if driver == NEW)[-1]
    fleet.fault(faulty, "xid79", gpu=1, when="upgrade")
    # One failed node of a wave does not stop this rollout: the runs after it have a rolled-back node to rebuild.
    shape = dict(SHAPE, gpufleet_bom=BOM_NEWER, gpufleet_wave_max_fail_percentage=100)
    resumed = fleet.upgrade(out / "report", **shape)
    finished = {n: fleet.state_file(n) for n in fleet.names}
    rebuilt = fleet.upgrade(out / "fresh-report", **shape)
    return {"canary": canary, "rc": proc.returncode, "log": (out / "stop.log").read_text(), "at": stopped_at, "resumed": resumed,
            "stopped_evidence": stopped_evidence, "faulty": faulty, "rebuilt": rebuilt, "rebuilt_evidence": evidence(out / "fresh-report"),
            "id": fleet.rollout_section(canary)["id"], "finished": finished}


def test_the_stop_file_finishes_the_nodes_in_flight_and_starts_no_new_node(fleet, stopped):
    log = stopped["log"]
    assert "STOPS before wave" in log and "the stop file" in log, log[-5000:]
    assert f"To resume, delete {fleet.workdir / 'gpufleet.stop'} and run the same command again" in log, log[-5000:]
    at = stopped["at"]
    # The canary, in flight when the file appeared, was finished: upgraded and back in service.
    driver, node, section = at[stopped["canary"]]
    assert driver == NEWER and "DRAIN" not in node["state"] and section["result"] == "upgraded", at[stopped["canary"]]
    # No node was left drained, and some were never started: still on the old BOM, no phase past preflight.
    untouched = [n for n, (driver, _node, _section) in at.items() if driver == NEW]
    assert untouched, at
    for name, (driver, node, section) in at.items():
        assert "DRAIN" not in node["state"], (name, node)
        if driver == NEW:
            assert {p["name"] for p in section.get("phases", [])} <= {"preflight"}, (name, section)


def test_a_stopped_run_writes_its_evidence(fleet, stopped):
    found = stopped["stopped_evidence"]
    assert_evidence_whole(fleet, found, stopped["id"], {n: section for n, (_driver, _node, section) in stopped["at"].items()})
    assert "the stop file" in (found["report"]["summary"]["stopped_reason"] or ""), found["report"]["summary"]
    assert found["nodes"][stopped["canary"]]["result"] == "upgraded"
    assert {r["result"] for n, r in found["nodes"].items() if stopped["at"][n][0] == NEW} == {"not_started"}, found["nodes"]


def test_with_the_stop_file_gone_the_same_command_completes(fleet, stopped):
    resumed, faulty = stopped["resumed"], stopped["faulty"]
    assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-2000:]
    for name in fleet.names:
        section = fleet.rollout_section(name)
        want = ("rolled_back", NEW) if name == faulty else ("upgraded", NEWER)
        assert (section["result"], fleet.driver(name)) == want, (name, section)
        assert "DRAIN" not in fleet.node(name)["state"], name
    # The node keeps who decided its rollback and why, for any later run.
    rollback = fleet.rollout_section(faulty)["rollback"]
    assert rollback["result"] == "validated" and any(w in rollback["reason"].lower() for w in ("gpu_lost", "xid")), rollback


def test_a_run_after_a_rollback_rebuilds_every_record_from_the_state_files(fleet, stopped):
    """Issue 22: run again with no earlier evidence (an AWX job's fresh project folder), every node finished by earlier runs;
    it failed writing its evidence ("rollback is null but the result is rolled_back"). It changes nothing and writes it all."""
    rebuilt, faulty = stopped["rebuilt"], stopped["faulty"]
    assert rebuilt.returncode == 0, rebuilt.stdout[-6000:] + rebuilt.stderr[-2000:]
    # Nothing changed but the new evidence folder's files: every node's state file as the run before left it.
    changed = [block.split("]", 1)[0] for block in rebuilt.stdout.split("TASK [")[1:] if "\nchanged: [" in block]
    assert all("Write the per-node JSON" in task for task in changed), changed
    assert {n: fleet.state_file(n) for n in fleet.names} == stopped["finished"]
    found = stopped["rebuilt_evidence"]
    assert_evidence_whole(fleet, found, stopped["id"])
    record = found["nodes"][faulty]
    assert record["rollback"] == fleet.rollout_section(faulty)["rollback"], record
    assert (record["before"]["driver"], record["after"]["driver"]) == (NEW, NEW), record
    upgraded = found["nodes"][stopped["canary"]]
    assert (upgraded["before"]["driver"], upgraded["after"]["driver"]) == (NEW, NEWER), upgraded


@pytest.fixture(scope="module")
def nvl72(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-units-nvl72")
    runfiles = write_runfiles(base / "runfiles", (TRAY_OLD, TRAY_NEW))
    with fleet_up(NVL72_SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


@pytest.fixture(scope="module")
def units(nvl72, tmp_path_factory):
    """A rollout to TRAY_NEW without gpufleet_unit_by, so by nvlink_domain (the trays' default: nvl-a01..a04 domain rack-a,
    the canary unit; nvl-b01..b04 rack-b), nvl-b02 losing a GPU after its upgrade, Slurm's states sampled throughout."""
    out = tmp_path_factory.mktemp("units")
    before = {n: nvl72.driver(n) for n in nvl72.names}
    # No cuda list: a BOM may leave it out (the preflight role's argument spec failed on it: no attribute 'cuda').
    bom = {"driver": {"version": TRAY_NEW, "install": "runfile", "kernel_module": "open"}, "gpu": {"model": "NVIDIA GB200", "count": 4}}
    shape = {"gpufleet_bom": bom, "gpufleet_max_unavailable": 4, "gpufleet_waves": ["100%"], "gpufleet_soak_seconds": 1,
             "gpufleet_failure_budget": 4, "gpufleet_wave_max_fail_percentage": 100, "nvidia_driver_imex_timeout": 60}
    # The same rollout over an inventory that does not name the trays' domains: no default unit, refused
    refused = nvl72.upgrade(out / "refused", nvlink_domain="", **shape)
    after_refusal = {n: (nvl72.node(n), nvl72.rollout_section(n), nvl72.driver(n)) for n in nvl72.names}
    nvl72.fault("nvl-b02", "xid79", gpu=1, when="upgrade")
    sampler = nvl72.sampler(out / "slurm-states.jsonl")
    try:
        done = nvl72.upgrade(out / "report", **shape)  # gpufleet_unit_by unset: nvlink_domain by default on trays
    finally:
        samples = sampler.stop()
    (out / "upgrade.log").write_text(done.stdout + done.stderr)  # for a failing test's reader
    after = {n: nvl72.driver(n) for n in nvl72.names}
    again = nvl72.upgrade(out / "again", **shape)  # the same command once more
    (out / "again.log").write_text(again.stdout + again.stderr)
    return {"run": done, "samples": samples, "before": before, "report": out / "report", "refused": refused, "after_refusal": after_refusal,
            "after": after, "again": again, "after_again": {n: (nvl72.driver(n), nvl72.node(n)["state"]) for n in nvl72.names}}


def test_trays_without_units_are_refused_before_any_node_is_touched(units):
    """Without gpufleet_unit_by, over an inventory that does not name the trays' NVLink domains (no default unit), the rollout
    over NVL72 trays stops at the plan, saying why and what to set; no tray is drained or changed, and the locks it took are
    given back (the same rollout with the domains named, run next, is not refused as its twin)."""
    refused = units["refused"]
    assert refused.returncode != 0
    output = " ".join(refused.stdout.split())
    assert "refuses to start: 8 targets are GB200/GB300 NVL72 compute trays" in output, failures(refused.stdout)
    assert ": nvl-a01, nvl-a02, nvl-a03, nvl-a04" in output and "a driver cannot be mixed within an NVLink domain" in output
    assert "Set gpufleet_unit_by: nvlink_domain" in output and "No node was touched" in output
    for name, (node, section, driver) in units["after_refusal"].items():
        assert "DRAIN" not in node["state"] and driver == units["before"][name], (name, node, driver)
        assert section.get("status") != "running", (name, section)


DOMAINS = {"nvlink_domain rack-a": ["nvl-a01", "nvl-a02", "nvl-a03", "nvl-a04"],
           "nvlink_domain rack-b": ["nvl-b01", "nvl-b02", "nvl-b03", "nvl-b04"]}


def imex_domain(fleet, tray):
    """nvidia-imex-ctl -N -j on the tray: {status, versions of its nodes, hosts}."""
    doc = json.loads(fleet.ssh_ok(tray, "nvidia-imex-ctl -N -j"))
    nodes = doc["nodes"].values()
    return {"status": doc["status"], "versions": {n.get("version") for n in nodes}, "hosts": sorted(n["host"] for n in nodes),
            "ready": {n["status"] for n in nodes}}


def test_one_failure_rolls_its_whole_unit_back_and_the_other_unit_is_upgraded(nvl72, units):
    done = units["run"]
    assert "units of change (gpufleet_unit_by nvlink_domain): nvlink_domain rack-a of 4, nvlink_domain rack-b of 4" in done.stdout, (
        failures(done.stdout) + done.stdout[-6000:])
    assert "gpufleet_unit_by unset: 8 targets are NVL72 compute trays in 2 NVLink domain(s), so each nvlink_domain is one unit" in (
        " ".join(done.stdout.split()))
    for name in DOMAINS["nvlink_domain rack-a"]:
        assert (nvl72.rollout_section(name)["result"], nvl72.driver(name)) == ("upgraded", TRAY_NEW), name
    for name in DOMAINS["nvlink_domain rack-b"]:
        section = nvl72.rollout_section(name)
        assert (section["result"], nvl72.driver(name)) == ("rolled_back", units["before"][name]), (name, section)
        assert section["rollback"]["result"] == "validated", (name, section)
        reason = section["rollback"]["reason"]
        if name == "nvl-b02":  # the tray that failed: its own reason
            assert "gpu_lost" in reason or "xid" in reason.lower(), section["rollback"]
        else:  # rolled back for its unit: the reason names the unit and the tray that failed, not an IMEX domain its mate kept
            # DOWN (a tray's verify leaves the domain to the unit: unit_end.yml checks it once, with every member changed)
            assert "unit nvlink_domain rack-b" in reason and "nvl-b02" in reason, section["rollback"]
            assert "imex_domain" not in reason, section["rollback"]
        assert "DRAIN" not in nvl72.node(name)["state"], name


def test_the_tray_verify_brings_each_domains_imex_up_on_one_driver(nvl72, units):
    """The driver role's tray verify (fabric Completed, IMEX at the driver's version) ran on each tray, and the unit's IMEX
    domain check (verify_domain: the domain UP with every tray, judged once every member changed) passed on each tray of the
    upgraded domain; the rolled-back domain is UP again on its old driver."""
    log = units["run"].stdout
    assert "TASK [gpufleet.lifecycle.rollout : Wait for the IMEX domain of the unit's trays (a node without IMEX passes)]" in log, failures(log)
    verified = log.split("TASK [gpufleet.lifecycle.nvidia_driver : Check the fabric, IMEX and the IMEX domain]")
    assert len(verified) > 1, failures(log)
    for unit, driver in (("nvlink_domain rack-a", TRAY_NEW), ("nvlink_domain rack-b", TRAY_OLD)):
        addresses = sorted(nvl72.address[t] for t in DOMAINS[unit])
        for tray in DOMAINS[unit]:
            assert nvl72.sim(tray)["imex"]["version"] == driver, (tray, nvl72.sim(tray)["imex"])
            assert imex_domain(nvl72, tray) == {"status": "UP", "versions": {driver}, "hosts": addresses, "ready": {"READY"}}, tray
    for tray in DOMAINS["nvlink_domain rack-a"]:
        assert any(f"ok: [{tray}]" in block.split("TASK [", 1)[0] for block in verified[1:]), (tray, failures(log))


# Once a known gap (an xfail): after a member's reboot Slurm returned it to service by itself (ReturnToService=2, DOWN
# after 'reboot complete') before steps/hold.yml drained it again; node_maintenance now drains it again as soon as its
# reboot completes, so a member is never in service between two samples out.
def test_a_units_nodes_go_out_and_come_back_together_in_slurms_states(units):
    """Invariant 12 from Slurm's samples: each node of a unit went out once; all were out at once before any came back,
    and they came back within one resume step of each other, so no sample shows a member in service beside one out and
    changing (on another driver)."""
    times = sorted(by_time(units["samples"]).items())
    for unit, members in DOMAINS.items():
        spans = {}
        for name in members:
            out = [t for t, nodes in times if name in nodes and unavailable(nodes[name]["state"])]
            assert out, (unit, name)
            spans[name] = (out[0], out[-1])
            back = [t for t, nodes in times if out[0] < t < out[-1] and name in nodes and not unavailable(nodes[name]["state"])]
            assert not back, f"{name} of {unit} was in service at {back[:3]} between its first and last sample out"
        assert max(s for s, _e in spans.values()) < min(e for _s, e in spans.values()), (unit, spans)
        # Back in service in one step (one resume task over the unit), not one after another's validation.
        assert max(e for _s, e in spans.values()) - min(e for _s, e in spans.values()) < 10, (unit, spans)


def test_a_second_run_changes_nothing_on_the_trays(units):
    """The same command run again: rack-a is at the BOM and rack-b was rolled back by this rollout (settled), so no tray
    changes, none is drained, and the run ends well. (Its one change is on the controller: the evidence written into
    the run's new report folder.)"""
    again = units["again"]
    assert again.returncode == 0, failures(again.stdout) + again.stdout[-4000:]
    assert set(recap(again.stdout)) >= set(units["after"]), recap(again.stdout)
    on_trays = [line for line in again.stdout.splitlines() if line.startswith("changed: [") and "-> localhost]" not in line]
    assert on_trays == [], on_trays
    for name, (driver, state) in units["after_again"].items():
        assert driver == units["after"][name] and "DRAIN" not in state, (name, driver, state)
