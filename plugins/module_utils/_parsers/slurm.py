# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse Slurm's ``scontrol show node``, ``squeue -h -o %i,%u,%j`` and ``scontrol show config`` (private).

Pure functions: text in, plain dicts out, :class:`ParseError` on anything they cannot read for sure.
The node state is read as Slurm 21.08 and later print it (``src/api/node_info.c``:
``node_state_string_complete``): one base state and ``+FLAG`` for each flag set, names from
``src/common/slurm_protocol_defs.c`` (``node_states[]``, ``node_state_flags[]``). A flag this parser
does not know (Slurm prints ``?`` for a bit it has no name for), a lower-case or compact form
(``drained*``, which is what sinfo prints) or a value cut off is an error, never "not drained". Slurm ends
every line with a newline and every multi-line record with a blank line: output without them was cut
short (a ``Reason=`` cut before its ``[user@time]`` would name no owner) and is an error too.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, cut_line, cut_short

# node_states[] of Slurm 21.08 .. 25.11 (NODE_STATE_BASE). "INVALID" (a base Slurm has no name for) is refused.
BASE_STATES = frozenset(("IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"))
# node_state_flags[] of Slurm 22.05 (the first block) and the flags later releases added (BLOCKED, EXTERNAL).
STATE_FLAGS = frozenset(
    (
        "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "INVALID_REG", "FAIL", "MAINTENANCE",
        "POWER_DOWN", "POWER_UP", "PERFCTRS", "POWERED_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED",
        "RESUME", "NOT_RESPONDING", "PLANNED", "POWERING_UP", "POWERING_DOWN",
        "BLOCKED", "EXTERNAL",
    )
)
REBOOT_FLAGS = frozenset(("REBOOT_REQUESTED", "REBOOT_ISSUED"))
# Jobs still hold the node.
_BUSY_BASES = frozenset(("ALLOCATED", "MIXED"))
_STATE = re.compile(r"[A-Z][A-Z_]*(?:\+[A-Z][A-Z_]*)*")
_KEY = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_:]*)=(?P<value>.*)")
# Keys whose values Slurm prints without a space: a word without "=" after one of them means the
# output is cut off or is not scontrol's ("State=IDLE+DRAIN Threa").
_ONE_WORD_KEYS = frozenset(
    (
        "NodeName", "Arch", "CoresPerSocket", "CPUAlloc", "CPUEfctv", "CPUTot", "CPULoad", "NodeAddr", "NodeHostName",
        "Port", "Version", "RealMemory", "AllocMem", "FreeMem", "Sockets", "Boards", "State", "ThreadsPerCore",
        "TmpDisk", "Weight", "NextState", "BootTime", "SlurmdStartTime", "LastBusyTime", "ResumeAfterTime",
    )
)
# What Slurm prints after the reason (node_info.c): the reason ends where the first of them starts.
_AFTER_REASON = re.compile(
    r"\s(?:Comment|Extra|InstanceId|InstanceType|ReservationName|TLSCertTokenSet|TLSCertLastRenewal|Topology|Parameters)="
)
_REASON_START = re.compile(r"(?:^|\s)Reason=")
# " [user@time]" after the first reason line; time as SLURM_TIME_FORMAT=standard prints it (%FT%T).
_REASON_BY = re.compile(r" \[(?P<user>[^\s@\[\]]+)@(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]")
# Later reason lines: "\n" + 10 spaces in the multi-line form, 8 spaces in the one-line form.
_REASON_LINE_BREAK = re.compile(r"\n[ \t]*| {8,}")
# squeue's %i (src/squeue/print.c _print_job_job_id): 123, an array task 123_4, a pending array 123_[1-5,7%2] (its commas
# are inside the brackets), a heterogeneous job's component 123+0.
_JOB_ID = re.compile(r"[0-9]{1,20}(?:_(?:[0-9]{1,10}|\[[0-9][0-9,%:\-]{0,1024}\])|\+[0-9]{1,10})?")
# %u: the user's name, or the uid where it has none. POSIX names, with '@' (sssd's user@domain), '\' (winbind's
# DOMAIN\user) and a trailing '$' (machine accounts); never a space, a comma or a control character.
_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._@\\-]{0,255}\$?")
_SQUEUE_LINE = re.compile(r"(?P<id>[^,\[]*(?:\[[^\]]*\])?),(?P<user>[^,]*),(?P<name>.*)")
_LAST_KEY = re.compile(r"(?:^|\s)(?P<key>[A-Za-z][A-Za-z0-9_:]*)=")
_SLURM_USER = re.compile(r"(?m)^SlurmUser\s*=\s*(?P<name>[^\s(]+)\((?P<uid>[0-9]+)\)[ \t]*$")


def parse_state(state):
    """``MIXED+DRAIN``, ``IDLE+DRAIN+REBOOT_REQUESTED+NOT_RESPONDING``... -> ``(base, flags, not_responding)``.

    ``flags`` keeps Slurm's order without ``NOT_RESPONDING``, which is ``not_responding``.
    """
    if not isinstance(state, str) or not _STATE.fullmatch(state):
        raise ParseError(
            f"scontrol show node: State={state!r} is not BASE+FLAG+... as Slurm 21.08 and later print it "
            "(upper case, no '*' or other sinfo symbol): the output is cut off or not from scontrol show node"
        )
    base, *flags = state.split("+")
    if base not in BASE_STATES:
        raise ParseError(f"scontrol show node: unknown base state {base!r} in State={state} (known: {', '.join(sorted(BASE_STATES))})")
    unknown = [flag for flag in flags if flag not in STATE_FLAGS]
    if unknown:
        raise ParseError(
            f"scontrol show node: unknown state flag {unknown[0]!r} in State={state}: this module does not guess what it means "
            "for a drain; report it with the Slurm version"
        )
    if len(set(flags)) != len(flags):
        raise ParseError(f"scontrol show node: a flag repeats in State={state}")
    not_responding = "NOT_RESPONDING" in flags
    return base, [flag for flag in flags if flag != "NOT_RESPONDING"], not_responding


def drain_state(base, flags):
    """``draining`` (DRAIN flag, jobs still run), ``drained`` (DRAIN flag, no jobs), or None."""
    if "DRAIN" not in flags:
        return None
    if base in _BUSY_BASES or "COMPLETING" in flags:
        return "draining"
    return "drained"


def parse_show_nodes(text):
    """Every node record of ``scontrol show node [-o]`` output, as a list of dicts (see parse_show_node)."""
    text = text or ""
    records = [record for record in re.split(r"(?m)^(?=NodeName=)", text) if record.strip()]
    nodes = [_parse_record(record) for record in records]  # first: their errors name a field cut ("State=IDLE+DR")
    cut = cut_line(text)
    if cut and cut.strip():
        # A value on it may be cut short: "Reason=ticket 12" without its " [alice@...]" would name no owner.
        keys = _LAST_KEY.findall(cut)
        field = "Reason=" if "Reason" in keys else (f"{keys[-1]}=" if keys else "the node record")
        raise cut_short("scontrol show node", f"{field} of node {nodes[-1]['name']}" if nodes else field, cut)
    for node, record in zip(nodes, records):
        # The multi-line form ends a record with a blank line: without it, later lines (of a reason) may be missing.
        if "\n" in record.strip("\n") and not record.endswith("\n\n"):
            raise ParseError(
                f"scontrol show node: the record of node {node['name']} does not end with the blank line scontrol prints "
                "after it: the output was cut short, read it again whole"
            )
    return nodes


def parse_show_node(text):
    """One node of ``scontrol show node -o NAME`` (one-line or multi-line form).

    Returns ``{"name", "state", "base_state", "flags", "not_responding", "drain", "fail", "down",
    "drain_state", "reason", "reason_user", "reason_time", "cpu_alloc", "cpu_total", "fields"}``.
    ``reason`` is the reason as set (later lines joined with ``\\n``), without the ``[user@time]``
    Slurm appends (``reason_user``, ``reason_time``: None when Slurm prints none); ``fields`` holds
    every other ``Key=value`` as printed.
    """
    nodes = parse_show_nodes(text)
    if len(nodes) != 1:
        raise ParseError(f"scontrol show node: expected one node record, found {len(nodes)}")
    return nodes[0]


def _split_fields(text):
    """``Key=value`` pairs of one node record; a value may hold spaces (``OS=Linux 6.1 #1 SMP``)."""
    fields = {}
    key = None
    for word in text.split():
        match = _KEY.fullmatch(word)
        if match:
            key = match.group("key")
            if key in fields:
                raise ParseError(f"scontrol show node: {key}= appears twice in one node record")
            fields[key] = match.group("value")
        elif key is None:
            raise ParseError(f"scontrol show node: no NodeName= in the output (it starts with {word[:40]!r})")
        elif key in _ONE_WORD_KEYS:
            raise ParseError(
                f"scontrol show node: unexpected text {word[:40]!r} after {key}={fields[key]}: the output looks cut off or is not scontrol show node"
            )
        else:
            fields[key] = (fields[key] + " " + word).strip()
    return fields


def _take_reason(record):
    """``(record without the reason, reason, user, time)``; the reason runs to the next key Slurm prints after it."""
    start = _REASON_START.search(record)
    if not start:
        return record, None, None, None
    first_after = _AFTER_REASON.search(record)
    if first_after and first_after.start() < start.start():  # "Reason=" inside a Comment= or Extra= value: no reason
        return record, None, None, None
    end_match = _AFTER_REASON.search(record, start.end())
    end = end_match.start() if end_match else len(record)
    segment = record[start.end() : end]
    user = when = None
    by = _REASON_BY.search(segment)
    if by:
        user, when = by.group("user"), by.group("time")
        lines = [segment[: by.start()], *_REASON_LINE_BREAK.split(segment[by.end() :])]
    else:  # no [user@time] (reason_time 0): only a newline marks a later line
        lines = segment.split("\n")
    reason = "\n".join(line.strip() for line in lines if line.strip()) or None
    return record[: start.start()] + " " + record[end:], reason, user, when


def _parse_record(record):
    rest, reason, reason_user, reason_time = _take_reason(record)
    fields = _split_fields(rest)
    if not fields.get("NodeName"):
        raise ParseError("scontrol show node: no NodeName= in the output")
    name = fields["NodeName"]
    if "State" not in fields:
        raise ParseError(f"scontrol show node: no State= for node {name}")
    # Slurm prints "State=... ThreadsPerCore=..." in one piece: without it the output was cut after State.
    if "ThreadsPerCore" not in fields:
        raise ParseError(f"scontrol show node: no ThreadsPerCore= after State={fields['State']} for node {name}: the output looks cut off")
    base, flags, not_responding = parse_state(fields["State"])
    return {
        "name": name,
        "state": fields["State"],
        "base_state": base,
        "flags": flags,
        "not_responding": not_responding,
        "drain": "DRAIN" in flags,
        "fail": "FAIL" in flags,
        "down": base == "DOWN",
        "drain_state": drain_state(base, flags),
        "reason": reason,
        "reason_user": reason_user,
        "reason_time": reason_time,
        "cpu_alloc": _count(fields, "CPUAlloc", name),
        "cpu_total": _count(fields, "CPUTot", name),
        "fields": fields,
    }


def _count(fields, key, name):
    value = fields.get(key)
    if value is None:
        return None
    if not value.isdigit():
        raise ParseError(f"scontrol show node: {key}={value!r} of node {name} is not a count")
    return int(value)


def parse_squeue(text):
    """``squeue -h -o %i,%u,%j`` -> ``[{"id", "user", "name"}]`` (a job name may hold commas).

    Each line is checked field by field (ParseError naming the line number and the field): a job id as
    %i prints it, a user name (or uid) as %u prints it; the name is the job's own and may hold anything
    but a newline (lines are split at "\n" only: a job name holding another line break stays one job).
    """
    text = text or ""
    cut = cut_line(text)
    if cut and cut.strip():
        raise cut_short("squeue", "the last job", cut)  # a job id, user or name cut short, or a job missing
    jobs = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        match = _SQUEUE_LINE.fullmatch(line)
        if match is None:
            raise ParseError(f"squeue: line {number} is not 'JOBID,USER,NAME' as 'squeue -h -o %i,%u,%j' prints it: {line[:120]!r}")
        job_id, user, name = match.group("id", "user", "name")
        if not _JOB_ID.fullmatch(job_id):
            raise ParseError(f"squeue: line {number}: job id {job_id[:64]!r} is not one Slurm prints (123, 123_4, 123_[1-5], 123+0)")
        if not _USER.fullmatch(user):
            raise ParseError(
                f"squeue: line {number}: user {user[:64]!r} of job {job_id} is not a user name or uid as squeue prints it "
                "(no space, comma or control character)"
            )
        jobs.append({"id": job_id, "user": user, "name": name})
    return jobs


def parse_slurm_user(text):
    """``scontrol show config`` -> ``{"name", "uid"}`` of ``SlurmUser = slurm(64030)`` (who slurmctld runs as)."""
    match = _SLURM_USER.search(text or "")
    if not match:
        raise ParseError("scontrol show config: no 'SlurmUser = NAME(UID)' line")
    return {"name": match.group("name"), "uid": match.group("uid")}
