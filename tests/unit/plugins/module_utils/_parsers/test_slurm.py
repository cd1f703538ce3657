"""Parsing of scontrol show node / squeue / scontrol show config output (plugins/module_utils/_parsers/slurm.py)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import (
    parse_show_node,
    parse_show_nodes,
    parse_slurm_user,
    parse_squeue,
    parse_state,
)

from tests.conftest import OWN

SLURM = OWN / "slurm"


def fixture(name):
    return (SLURM / name).read_text()


def record(state="IDLE", tail=""):
    """A real one-line record (Slurm 22.05.8, show_node_idle.txt) with another State and text appended."""
    text = fixture("show_node_idle.txt").rstrip("\n")
    return re.sub(r" State=\S+ ", f" State={state} ", text) + tail + "\n"


# --- real scontrol show node output (Slurm 22.05.8, Debian 12 slurm-wlm, on the simulated fleet) --------

# file: (state, base, flags, not_responding, drain_state, reason, reason_user, cpu_alloc)
REAL_NODES = {
    "show_node_idle.txt": ("IDLE", "IDLE", [], False, None, None, None, 0),
    "show_node_mixed.txt": ("MIXED", "MIXED", [], False, None, None, None, 1),
    "show_node_mixed_not_responding.txt": ("MIXED+NOT_RESPONDING", "MIXED", [], True, None, None, None, 1),
    "show_node_idle_not_responding.txt": ("IDLE+NOT_RESPONDING", "IDLE", [], True, None, None, None, 0),
    "show_node_mixed_drain_ours.txt": (
        "MIXED+DRAIN", "MIXED", ["DRAIN"], False, "draining", "gpufleet:r-2026: driver upgrade a=b [x]", "root", 1,
    ),
    "show_node_multiline_mixed_drain.txt": (
        "MIXED+DRAIN", "MIXED", ["DRAIN"], False, "draining", "gpufleet:r-2026: driver upgrade a=b [x]", "root", 1,
    ),
    "show_node_idle_drain_others.txt": ("IDLE+DRAIN", "IDLE", ["DRAIN"], False, "drained", "hw ticket 123", "root", 0),
    "show_node_down_drain.txt": ("DOWN+DRAIN", "DOWN", ["DRAIN"], False, "drained", "rma: gpu 3", "root", 0),
    "show_node_down_not_responding.txt": ("DOWN+NOT_RESPONDING", "DOWN", [], True, None, "Not responding", "root", 0),
    "show_node_down_reboot_complete.txt": (
        "DOWN", "DOWN", [], False, None, "gpufleet:r9: reboot : reboot issued : reboot complete", "root", 0,
    ),
    "show_node_idle_drain_reboot_requested.txt": (
        "IDLE+DRAIN+REBOOT_REQUESTED", "IDLE", ["DRAIN", "REBOOT_REQUESTED"], False, "drained", "gpufleet:r9: reboot", "root", 0,
    ),
    "show_node_idle_drain_reboot_requested_not_responding.txt": (
        "IDLE+DRAIN+REBOOT_REQUESTED+NOT_RESPONDING", "IDLE", ["DRAIN", "REBOOT_REQUESTED"], True, "drained", "gpufleet:r9: reboot", "root", 0,
    ),
    "show_node_mixed_drain_reboot_requested.txt": (
        "MIXED+DRAIN+REBOOT_REQUESTED", "MIXED", ["DRAIN", "REBOOT_REQUESTED"], False, "draining", "gpufleet:r9: reboot", "root", 1,
    ),
    "show_node_down_drain_reboot_issued.txt": (
        "DOWN+DRAIN+REBOOT_ISSUED", "DOWN", ["DRAIN", "REBOOT_ISSUED"], False, "drained", "gpufleet:r9: reboot : reboot issued", "root", 0,
    ),
    "show_node_idle_fail.txt": ("IDLE+FAIL", "IDLE", ["FAIL"], False, None, "psu alarm, do not touch", "root", 0),
    "show_node_mixed_fail.txt": ("MIXED+FAIL", "MIXED", ["FAIL"], False, None, "ecc storm on gpu 2", "root", 1),
    "show_node_down_admin.txt": ("DOWN", "DOWN", [], False, None, "bad dimm, ticket 77", "root", 0),
    # Reason=$'gpufleet:r1: upgrade\nkeep out, bob': Slurm prints the second line after [user@time].
    "show_node_idle_drain_multiline_reason.txt": (
        "IDLE+DRAIN", "IDLE", ["DRAIN"], False, "drained", "gpufleet:r1: upgrade\nkeep out, bob", "root", 0,
    ),
    "show_node_multiline_idle_drain_multiline_reason.txt": (
        "IDLE+DRAIN", "IDLE", ["DRAIN"], False, "drained", "gpufleet:r1: upgrade\nkeep out, bob", "root", 0,
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_NODES))
def test_real_scontrol_show_node(name):
    state, base, flags, not_responding, drain_state, reason, user, cpu_alloc = REAL_NODES[name]
    node = parse_show_node(fixture(name))
    assert node["state"] == state
    assert node["base_state"] == base
    assert node["flags"] == flags
    assert node["not_responding"] is not_responding
    assert node["drain_state"] == drain_state
    assert node["drain"] is ("DRAIN" in flags)
    assert node["fail"] is ("FAIL" in flags)
    assert node["down"] is (base == "DOWN")
    assert node["reason"] == reason
    assert node["reason_user"] == user
    assert node["cpu_alloc"] == cpu_alloc
    assert node["cpu_total"] == 4


def test_every_real_fixture_is_in_the_table():
    files = {p.name for p in SLURM.glob("show_node_*.txt")} - {"show_node_not_found.txt"}
    assert files == set(REAL_NODES)


def test_fields_with_spaces_and_reason_time():
    node = parse_show_node(fixture("show_node_mixed_drain_ours.txt"))
    assert node["name"] == "busy-01"
    assert node["fields"]["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"
    assert node["fields"]["NodeAddr"] == "127.0.50.1"
    assert node["fields"]["Version"] == "22.05.8"
    assert node["fields"]["AllocTRES"] == "cpu=1"
    # The "=" inside the reason does not become a field.
    assert "a" not in node["fields"]
    assert "Reason" not in node["fields"]
    assert node["reason_time"] == "2026-11-30T15:38:31"


def test_next_state_is_not_state():
    node = parse_show_node(fixture("show_node_mixed_drain_reboot_requested.txt"))
    assert node["fields"]["NextState"] == "DOWN"
    assert node["state"] == "MIXED+DRAIN+REBOOT_REQUESTED"


def test_not_found_output_is_a_parse_error():
    with pytest.raises(ParseError, match="no NodeName"):
        parse_show_node(fixture("show_node_not_found.txt"))


def test_several_records():
    text = fixture("show_node_idle.txt") + fixture("show_node_mixed.txt")
    assert [n["name"] for n in parse_show_nodes(text)] == ["idle-03", "busy-01"]
    with pytest.raises(ParseError, match="expected one node record, found 2"):
        parse_show_node(text)


# --- cut-off output ------------------------------------------------------------------------------------


def test_truncated_state_is_an_error_not_in_service():
    # Seen: "State=IDLE+DRAIN Threa" read as State "IDLE+DRAIN THREA", flag "DRAIN THREA": not drained.
    text = fixture("show_node_idle_drain_others.txt")
    cut = text[: text.index(" ThreadsPerCore=") + len(" Threa")]
    assert cut.endswith("State=IDLE+DRAIN Threa")
    with pytest.raises(ParseError, match="cut off"):
        parse_show_node(cut)
    with pytest.raises(ParseError, match="cut off"):
        parse_show_node(cut + "\n")  # a newline added after the cut: the fields still show it


@pytest.mark.parametrize("cut_after", ["State=IDLE+DRAIN", "State=IDLE+DR", "State=IDLE"])
def test_output_cut_in_or_right_after_the_state_is_an_error(cut_after):
    text = fixture("show_node_idle_drain_others.txt")
    cut = text[: text.index("State=") + len(cut_after)]
    with pytest.raises(ParseError):
        parse_show_node(cut)


def test_reason_cut_before_its_owner_is_an_error_not_a_reason_without_owner():
    # "Reason=hw ticket 123" cut before " [root@2026-...]": read as a reason nobody set, it could pass for ours.
    text = fixture("show_node_idle_drain_others.txt")
    for end in range(text.index("Reason=") + len("Reason="), len(text) - 1):
        with pytest.raises(ParseError, match=r"^scontrol show node: the output was cut short in Reason= of node idle-01 \(its last line"):
            parse_show_nodes(text[:end])
    assert parse_show_node(text)["reason_user"] == "root"


@pytest.mark.parametrize("name", sorted(REAL_NODES))
def test_every_prefix_of_a_record_is_an_error(name):
    # A cut in a field the record check sees ("State=IDLE+DR") says so; any other cut, in BootTime= or Reason=, too.
    text = fixture(name)
    for end in range(1, len(text) - 1):
        if text[end - 1] != "\n":
            with pytest.raises(ParseError, match=r"^scontrol show node: "):
                parse_show_nodes(text[:end])


@pytest.mark.parametrize("name", ["show_node_multiline_idle_drain_multiline_reason.txt", "show_node_multiline_mixed_drain.txt"])
def test_multi_line_record_cut_at_a_line_end_is_an_error(name):
    # Cut after "Reason=gpufleet:r1: upgrade [root@...]\n": the reason's second line ("keep out, bob") is missing.
    text = fixture(name)
    assert text.endswith("\n\n")
    for end in [match.end() for match in re.finditer("\n", text)][:-1]:
        # Before State= ... ThreadsPerCore= the record check names what is missing; after it, the blank line does.
        message = "does not end with the blank line scontrol prints" if end > text.index("ThreadsPerCore=") else "no State="
        with pytest.raises(ParseError, match=message):
            parse_show_nodes(text[:end])
    assert [node["name"] for node in parse_show_nodes(text + text)] == [parse_show_node(text)["name"]] * 2


# --- state strings -------------------------------------------------------------------------------------

STATES = [
    # state, base, flags, not_responding, drain_state
    ("IDLE", "IDLE", [], False, None),
    ("ALLOCATED", "ALLOCATED", [], False, None),
    ("IDLE+DRAIN", "IDLE", ["DRAIN"], False, "drained"),
    ("MIXED+DRAIN", "MIXED", ["DRAIN"], False, "draining"),
    ("ALLOCATED+DRAIN", "ALLOCATED", ["DRAIN"], False, "draining"),
    ("DOWN+DRAIN", "DOWN", ["DRAIN"], False, "drained"),
    ("IDLE+DRAIN+REBOOT_REQUESTED", "IDLE", ["DRAIN", "REBOOT_REQUESTED"], False, "drained"),
    # node_state_flags[] order: COMPLETING before DRAIN
    ("IDLE+COMPLETING+DRAIN", "IDLE", ["COMPLETING", "DRAIN"], False, "draining"),
    ("DOWN+DRAIN+NOT_RESPONDING", "DOWN", ["DRAIN"], True, "drained"),
    ("IDLE+CLOUD+POWERED_DOWN", "IDLE", ["CLOUD", "POWERED_DOWN"], False, None),
    ("IDLE+FAIL", "IDLE", ["FAIL"], False, None),
    ("ALLOCATED+FAIL", "ALLOCATED", ["FAIL"], False, None),
    ("IDLE+DRAIN+MAINTENANCE+RESERVED", "IDLE", ["DRAIN", "MAINTENANCE", "RESERVED"], False, "drained"),
    ("FUTURE", "FUTURE", [], False, None),
    ("UNKNOWN+NOT_RESPONDING", "UNKNOWN", [], True, None),
    ("IDLE+INVALID_REG+DRAIN", "IDLE", ["INVALID_REG", "DRAIN"], False, "drained"),
    ("MIXED+PLANNED", "MIXED", ["PLANNED"], False, None),
    ("IDLE+POWERING_UP", "IDLE", ["POWERING_UP"], False, None),
    ("DOWN+POWER_DOWN+POWERING_DOWN", "DOWN", ["POWER_DOWN", "POWERING_DOWN"], False, None),
    ("IDLE+DYNAMIC_NORM", "IDLE", ["DYNAMIC_NORM"], False, None),
]


@pytest.mark.parametrize(("state", "base", "flags", "not_responding", "expected_drain"), STATES, ids=[s[0] for s in STATES])
def test_state_forms(state, base, flags, not_responding, expected_drain):
    node = parse_show_node(record(state))
    assert (node["base_state"], node["flags"], node["not_responding"]) == (base, flags, not_responding)
    assert node["drain_state"] == expected_drain


@pytest.mark.parametrize(
    "state",
    [
        "", "BOGUS", "IDLE++DRAIN", "+DRAIN", "IDLE+DRAIN+BOGUS", "IDLE+?", "INVALID", "IDLE+DRAIN+DRAIN",
        # sinfo / pre-21.08 compact forms: not what this scontrol prints, so not guessed
        "DRAINED", "DRAINING", "IDLE*", "DOWN*+DRAIN", "ALLOC", "idle+drain", "MAINT", "IDLE+MAINT", "DRAINED$",
        # cut off
        "IDLE+DRAIN Threa", "IDLE+DR", "IDLE+DRAIN+",
    ],
)
def test_bad_or_unknown_state_is_a_parse_error(state):
    with pytest.raises(ParseError):
        parse_state(state)


def test_unknown_flag_in_a_record_is_an_error_not_in_service():
    with pytest.raises(ParseError, match="unknown state flag 'POWER_DRAIN'"):
        parse_show_node(record("IDLE+DRAIN+POWER_DRAIN"))


def test_missing_state_is_a_parse_error():
    with pytest.raises(ParseError, match="no State= for node n1"):
        parse_show_node("NodeName=n1 CPUAlloc=0\n")


def test_counts_that_are_not_numbers_are_errors():
    with pytest.raises(ParseError, match="CPUAlloc"):
        parse_show_node(record().replace("CPUAlloc=0", "CPUAlloc=x"))


# --- the reason ----------------------------------------------------------------------------------------


def test_reason_without_user_suffix():
    node = parse_show_node(record("IDLE+DRAIN", " Reason=maintenance window"))
    assert node["reason"] == "maintenance window"
    assert node["reason_user"] is None and node["reason_time"] is None


def test_reason_followed_by_comment_and_extra():
    # Slurm 22.05 prints Comment= and Extra= after the reason.
    node = parse_show_node(record("IDLE+DRAIN", " Reason=ticket x=1 [alice@2025-01-02T03:04:05] Comment=rack 4 Extra={\"a\": 1}"))
    assert node["reason"] == "ticket x=1"
    assert node["reason_user"] == "alice"
    assert node["reason_time"] == "2025-01-02T03:04:05"
    assert node["fields"]["Comment"] == "rack 4"
    assert node["fields"]["Extra"] == '{"a": 1}'


def test_reason_with_brackets_and_at_sign_in_its_text():
    node = parse_show_node(record("IDLE+DRAIN", " Reason=see [bob@ticket] now [root@2026-11-30T15:38:31]"))
    assert node["reason"] == "see [bob@ticket] now"
    assert node["reason_user"] == "root"


def test_reason_none_is_kept_as_written():
    # A person may write "none" as a reason: it is their reason, not "no reason".
    node = parse_show_node(record("IDLE+DRAIN", " Reason=none [admin@2026-11-30T15:38:31]"))
    assert node["reason"] == "none"


def test_multi_line_reason_followed_by_a_comment():
    # Later reason lines (real form in show_node_multiline_idle_drain_multiline_reason.txt) end where Comment= starts.
    text = fixture("show_node_multiline_idle_drain_multiline_reason.txt").rstrip("\n") + "\n   Comment=x\n\n"
    node = parse_show_node(text)
    assert node["reason"] == "gpufleet:r1: upgrade\nkeep out, bob"
    assert node["fields"]["Comment"] == "x"


def test_reason_text_in_a_comment_is_no_reason():
    node = parse_show_node(record("IDLE", " Comment=old Reason=gpufleet:r1: x [root@2026-11-30T15:38:31]"))
    assert node["reason"] is None
    assert node["reason_user"] is None


# --- squeue and show config ----------------------------------------------------------------------------


def test_real_squeue():
    assert parse_squeue(fixture("squeue_busy.txt")) == [{"id": "1", "user": "root", "name": "sim-busy-01"}]


def test_squeue_job_name_with_commas_and_empty():
    assert parse_squeue("12_3,bob,train,a,b\n\n") == [{"id": "12_3", "user": "bob", "name": "train,a,b"}]
    assert parse_squeue("77+1,carol,het\n") == [{"id": "77+1", "user": "carol", "name": "het"}]
    assert parse_squeue("") == []


@pytest.mark.parametrize("line", ["garbage", ",bob,x", "12,,x", "x12,bob,train", "12 ,bob,x"])
def test_squeue_bad_lines(line):
    with pytest.raises(ParseError, match="squeue"):
        parse_squeue(line + "\n")


@pytest.mark.parametrize("cut", ["12", "123,ali", "123,alice,tra", "123,alice,train"])
def test_squeue_cut_last_line_is_an_error(cut):
    # "12" of job 123, "ali" of alice: a job with another id or owner, or (dropped) a node that looks free.
    with pytest.raises(ParseError, match=r"^squeue: the output was cut short in the last job \(its last line"):
        parse_squeue("7,bob,x\n" + cut)
    assert parse_squeue("7,bob,x\n123,alice,train\n")[1] == {"id": "123", "user": "alice", "name": "train"}


def test_slurm_user_from_show_config():
    assert parse_slurm_user(fixture("show_config_excerpt.txt")) == {"name": "root", "uid": "0"}
    assert parse_slurm_user("SlurmdUser              = root(0)\nSlurmUser               = slurm(64030)\n") == {"name": "slurm", "uid": "64030"}
    with pytest.raises(ParseError, match="SlurmUser"):
        parse_slurm_user("SlurmdUser = root(0)\n")


# --- issue 21: parse_squeue accepts only what `squeue -h -o %i,%u,%j` prints, naming the line and the field --------------


@pytest.mark.parametrize(
    ("line", "job"),
    [
        ("123,alice,train", {"id": "123", "user": "alice", "name": "train"}),
        ("123_4,alice,sweep", {"id": "123_4", "user": "alice", "name": "sweep"}),
        ("123_[1-5,7%2],alice,sweep,a", {"id": "123_[1-5,7%2]", "user": "alice", "name": "sweep,a"}),  # commas in the id
        ("77+1,carol,het", {"id": "77+1", "user": "carol", "name": "het"}),
        ("9,1001,orphan", {"id": "9", "user": "1001", "name": "orphan"}),  # a uid with no name
        ("9,jo.doe@corp.example,x", {"id": "9", "user": "jo.doe@corp.example", "name": "x"}),
        ("9,svc-01$,", {"id": "9", "user": "svc-01$", "name": ""}),
        ("9,bob,name \x1c with\x0bbreaks\u2028", {"id": "9", "user": "bob", "name": "name \x1c with\x0bbreaks\u2028"}),
    ],
)
def test_squeue_lines_as_squeue_prints_them(line, job):
    assert parse_squeue(f"1,root,sim\n{line}\n") == [{"id": "1", "user": "root", "name": "sim"}, job]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a,b,c", r"^squeue: line 2: job id 'a' is not one Slurm prints"),
        ("12x,bob,c", r"^squeue: line 2: job id '12x' is not one Slurm prints"),
        ("12_,bob,c", r"^squeue: line 2: job id '12_' "),
        ("12+x,bob,c", r"^squeue: line 2: job id '12\+x' "),
        ("12_[1-5,bob,c", r"^squeue: line 2 is not 'JOBID,USER,NAME'"),  # an unclosed bracket: no id Slurm prints
        ("-1,bob,c", r"^squeue: line 2: job id '-1' "),
        ("12,bob smith,c", r"^squeue: line 2: user 'bob smith' of job 12 is not a user name or uid"),
        ("12,bob\t,c", r"^squeue: line 2: user 'bob\\t' of job 12 "),
        ("12,-bob,c", r"^squeue: line 2: user '-bob' of job 12 "),
        ("12,,c", r"^squeue: line 2: user '' of job 12 "),
        ("12,bob", r"^squeue: line 2 is not 'JOBID,USER,NAME'"),
        ("JOBID,USER,NAME", r"^squeue: line 2: job id 'JOBID' "),  # a header: -h was lost
    ],
)
def test_squeue_line_that_squeue_does_not_print_is_refused_naming_line_and_field(line, message):
    with pytest.raises(ParseError, match=message):
        parse_squeue(f"1,root,sim\n{line}\n")
