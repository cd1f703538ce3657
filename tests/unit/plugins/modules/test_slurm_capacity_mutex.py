"""gpufleet.lifecycle.slurm_capacity with drain_admitted: the admission and the drain in one step, under a Slurm
reservation used as a mutex, so that two admissions at once (two AWX job slices) cannot both take the same capacity.

A fake slurmctld keeps the nodes' states and the reservations and answers scontrol as Slurm 22.05 does (a second
reservation of a taken name is refused). A race is staged by running a second admission from inside the first one's
read of Slurm: the instant where both have read and neither has drained.
"""

from __future__ import annotations

import re

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import clock as _clock
from ansible_collections.gpufleet.lifecycle.plugins.modules import slurm_capacity

from tests.conftest import OWN

SCONTROL = "/usr/bin/scontrol"
POOL = [f"gpu-{i:02d}" for i in range(1, 7)]
MUTEX = "gpufleet-admission"
IDLE = (OWN / "slurm" / "show_node_idle.txt").read_text().strip()
# slurmctld's answer to a second reservation of one name (ESLURM_RESERVATION_NAME_DUP), as scontrol 22.05 prints it.
DUPLICATE = "Error creating the reservation: Duplicate reservation name\n"


class FakeClock:
    def __init__(self):
        self.now_s = 1_764_590_000.0

    def now(self):
        return self.now_s

    def sleep(self, seconds):
        self.now_s += seconds


class FakeSlurm:
    """slurmctld's nodes and reservations; scontrol's show node -o, update State=DRAIN, create / delete reservation."""

    def __init__(self):
        self.nodes = {name: {"state": "IDLE", "reason": None} for name in POOL}
        self.reservations: dict[str, list[str]] = {}
        self.log: list[tuple] = []
        self.on_read = None  # called once, at the next read (the staged race)
        self.after_read = None  # called once, right after the next whole read was answered (a change between read and drain)

    def listing(self, names=None):
        lines = []
        for name, node in self.nodes.items():
            if names is not None and name not in names:
                continue
            text = re.sub(r" State=\S+", f" State={node['state']}", re.sub(r"^NodeName=\S+ ", f"NodeName={name} ", IDLE))
            if node["reason"]:
                text += f" Reason={node['reason']} [root@2026-11-30T15:38:31]"
            lines.append(text)
        return "\n".join(lines) + "\n"

    def __call__(self, argv):
        verb = argv[0]
        if argv == ["show", "node", "-o"]:
            self.log.append(("read",))
            hook, self.on_read = self.on_read, None
            if hook:
                hook()
            listing = self.listing()
            after, self.after_read = self.after_read, None
            if after:
                after()
            return 0, listing, ""
        if argv[:3] == ["show", "node", "-o"] and len(argv) == 4:
            self.log.append(("reread", argv[3]))
            return 0, self.listing(argv[3].split(",")), ""
        fields = dict(arg.split("=", 1) for arg in argv[1:] if "=" in arg)
        if verb == "create" and argv[1] == "reservation":
            name = fields["ReservationName"]
            if name in self.reservations:
                return 1, "", DUPLICATE
            self.reservations[name] = fields["Nodes"].split(",")
            self.log.append(("lock", name, fields["Nodes"], fields["Flags"], fields["Duration"]))
            return 0, f"Reservation created: {name}\n", ""
        if verb == "delete":
            name = fields["ReservationName"]
            if name not in self.reservations:
                return 1, "", f"Error deleting the reservation: Requested reservation is invalid\n{name}\n"
            del self.reservations[name]
            self.log.append(("unlock", name))
            return 0, "", ""
        if verb == "update":
            for name in fields["NodeName"].split(","):
                self.nodes[name] = {"state": "IDLE+DRAIN", "reason": fields["Reason"]}
            self.log.append(("drain", fields["NodeName"], fields["Reason"]))
            return 0, "", ""
        raise AssertionError(f"unexpected scontrol call {argv}")


@pytest.fixture
def slurm(commands, monkeypatch):
    commands.tool("scontrol")
    monkeypatch.setattr(_clock, "SYSTEM", FakeClock())
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, text: None)
    fake = FakeSlurm()

    def run_command(module, args, **kwargs):
        seconds, argv = commands.split_timeout(args)
        commands.calls.append({"argv": list(argv), "cmd": list(args), "timeout": seconds, "environ_update": kwargs.get("environ_update"),
                               "kwargs": kwargs})
        assert argv[0] == SCONTROL
        return fake(list(argv[1:]))

    monkeypatch.setattr(commands, "run_command", run_command)
    return fake


def args(**extra):
    base = {"pool": POOL, "max_unavailable": 1, "admit": ["gpu-03"], "rollout_id": "awx-1", "drain_admitted": True}
    base.update(extra)
    return base


def test_the_admission_drains_what_it_admits_under_the_mutex_and_releases_it(slurm, run_module):
    result = run_module(slurm_capacity.main, args())
    assert not result.get("failed"), result
    assert result["admitted"] is True and result["changed"] is True and result["drained"] == ["gpu-03"]
    assert slurm.log == [("lock", MUTEX, "gpu-01", "IGNORE_JOBS,OVERLAP", "2"), ("read",), ("reread", "gpu-03"),
                         ("drain", "gpu-03", "gpufleet:awx-1: admitted by slurm_capacity"), ("unlock", MUTEX)]
    assert slurm.reservations == {}
    assert slurm.nodes["gpu-03"] == {"state": "IDLE+DRAIN", "reason": "gpufleet:awx-1: admitted by slurm_capacity"}


def test_a_node_already_out_of_service_is_counted_not_drained_again(slurm, run_module):
    slurm.nodes["gpu-03"] = {"state": "IDLE+DRAIN", "reason": "gpufleet:awx-1: admitted by slurm_capacity"}
    result = run_module(slurm_capacity.main, args())
    assert result["admitted"] is True and result["changed"] is False and result["drained"] == []
    assert [entry[0] for entry in slurm.log] == ["lock", "read", "unlock"]


def test_two_admissions_at_once_without_the_mutex_both_take_the_last_free_slot(slurm, run_module):
    """The race the mutex closes: each reads 0 out of a budget of 1 before either drains; both are admitted."""
    inner = {}
    slurm.on_read = lambda: inner.update(run_module(slurm_capacity.main, args(admit=["gpu-04"], drain_admitted=False)))
    outer = run_module(slurm_capacity.main, args(drain_admitted=False))
    assert outer["admitted"] is True and inner["admitted"] is True  # 2 nodes about to be drained, budget 1


def test_two_admissions_at_once_with_the_mutex_take_the_slot_once(slurm, run_module):
    inner = {}
    slurm.on_read = lambda: inner.update(run_module(slurm_capacity.main, args(admit=["gpu-04"], wait_timeout=5, poll_interval=1)))
    outer = run_module(slurm_capacity.main, args())
    assert outer["admitted"] is True and outer["drained"] == ["gpu-03"]
    # The second one never read while the first held the mutex: it waited, and was refused when its wait ran out.
    assert inner["failed"] is True and inner["admitted"] is False and inner["drained"] == []
    assert "Another admission held the Slurm reservation gpufleet-admission" in inner["msg"]
    assert slurm.nodes["gpu-04"]["state"] == "IDLE"
    # Once the first is done, the next admission reads its drain and waits for capacity, as the budget says.
    later = run_module(slurm_capacity.main, args(admit=["gpu-04"]))
    assert later["failed"] is True and later["counted"] == 2 and [e["node"] for e in later["unavailable"]] == ["gpu-03"]
    assert slurm.reservations == {}


def test_a_refused_admission_drains_nothing(slurm, run_module):
    slurm.nodes["gpu-06"] = {"state": "DOWN", "reason": "psu"}
    result = run_module(slurm_capacity.main, args())
    assert result["failed"] is True and result["drained"] == []
    assert slurm.nodes["gpu-03"]["state"] == "IDLE"
    assert "drain" not in [entry[0] for entry in slurm.log]
    assert slurm.reservations == {}


def test_check_mode_takes_no_mutex_and_drains_nothing(slurm, run_module):
    result = run_module(slurm_capacity.main, args(), check_mode=True)
    assert result["admitted"] is True and result["changed"] is True and result["drained"] == ["gpu-03"]
    assert slurm.log == [("read",)]


def test_drain_admitted_needs_a_rollout_id(slurm, run_module):
    result = run_module(slurm_capacity.main, args(rollout_id=None))
    assert result["failed"] is True and "drain_admitted needs rollout_id" in result["msg"]
    assert slurm.log == []


@pytest.mark.parametrize("reason", ["two\nlines", "x" * 201, ""])
def test_a_drain_reason_that_is_not_one_short_line_is_refused(slurm, run_module, reason):
    result = run_module(slurm_capacity.main, args(drain_reason=reason))
    if reason == "":  # empty: the default text
        assert result["drained"] == ["gpu-03"]
        return
    assert result["failed"] is True and "drain_reason" in result["msg"]
    assert slurm.log == []


def test_a_mutex_slurm_refuses_for_another_reason_fails_naming_what_to_fix(slurm, run_module, monkeypatch):
    original = slurm.__call__

    def denied(argv):
        if argv[:2] == ["create", "reservation"]:
            return 1, "", "Error creating the reservation: Access/permission denied\n"
        return original(argv)

    monkeypatch.setattr(FakeSlurm, "__call__", lambda self, argv: denied(argv))
    result = run_module(slurm_capacity.main, args())
    assert result["failed"] is True
    assert "admission mutex" in result["msg"] and "Access/permission denied" in result["msg"]
    assert slurm.nodes["gpu-03"]["state"] == "IDLE"


def test_a_mutex_that_cannot_be_deleted_is_a_warning_the_drain_stands(slurm, run_module, monkeypatch):
    original = FakeSlurm.__call__
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, text: warnings.append(text))
    monkeypatch.setattr(FakeSlurm, "__call__", lambda self, argv: (1, "", "slurm_load_reservations error\n") if argv[0] == "delete"
                        else original(self, argv))
    result = run_module(slurm_capacity.main, args())
    assert not result.get("failed") and result["drained"] == ["gpu-03"]
    assert any("expires by itself within 2 minutes" in w for w in warnings), warnings


def test_a_drain_someone_sets_between_the_read_and_ours_is_kept(slurm, run_module):
    """Slurm has no compare-and-set: a person drains the admitted node after the admission read it in service. The node is
    read again right before the drain; the admission backs off (their reason kept) and, on its next reading, counts the
    node as held by someone else instead of draining it."""
    person = {"state": "IDLE+DRAIN", "reason": "admin: PSU swap"}
    slurm.after_read = lambda: slurm.nodes.update({"gpu-03": dict(person)})
    result = run_module(slurm_capacity.main, args(max_unavailable=2, wait_timeout=3, poll_interval=1))
    assert slurm.nodes["gpu-03"] == person
    assert "drain" not in [entry[0] for entry in slurm.log], slurm.log
    assert result["drained"] == [] and result["held_by_others"] == ["gpu-03"], result
    assert slurm.reservations == {}


def test_a_node_in_service_at_the_reread_is_drained(slurm, run_module):
    result = run_module(slurm_capacity.main, args(admit=["gpu-03", "gpu-04"], max_unavailable=2))
    assert result["drained"] == ["gpu-03", "gpu-04"], result
    assert ("reread", "gpu-03,gpu-04") in slurm.log
