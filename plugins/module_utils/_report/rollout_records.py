# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's per-node records: strict validation and secret redaction (private).

A record is evidence: a wrong type or an impossible time in it is refused (naming the node and the
field) rather than rendered as a plausible report. URLs that carry credentials (a BMC URL with
``user:password@`` passed by mistake) are redacted wherever a string holds them (invariant 7).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._artifact import redact_url, secret_in_url, sub_urls
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._no_log import masked_forms, no_log_leaves

PHASES = ("preflight", "admission", "drain", "ofed", "nic_firmware", "gpu_firmware", "driver", "activate", "validate", "resume", "soak", "rollback")
PHASE_STATUSES = ("started", "ok", "failed", "skipped")
RESULTS = ("upgraded", "unchanged", "rolled_back", "failed_drained", "skipped", "not_started")
FAILED_RESULTS = ("rolled_back", "failed_drained")
CHECK_STATUSES = ("pass", "warn", "fail", "skip")
ROLLBACK_RESULTS = ("validated", "failed")
VERSION_KEYS = ("driver", "fabricmanager", "gpu_firmware", "nic_firmware")

# A node's name is also its evidence file's name (DEST/nodes/<node>.json): a plain file name.
NODE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
_COMPONENT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
REDACTED = "********"

RECORD_KEYS = {
    "node": True, "rollout_id": True, "wave": False, "domain": False, "result": True, "before": False, "after": False,
    "phases": False, "checks": False, "rollback": False, "drain": False, "skip_reason": False,
}
PHASE_KEYS = {"name": True, "start": True, "end": False, "status": True, "detail": False}
CHECK_KEYS = {"name": True, "status": True, "message": False, "observed": False, "expected": False}
ROLLBACK_KEYS = {"decided_by": True, "reason": True, "result": True}
DRAIN_KEYS = {"ours": True, "reason": False}
# Phase times are epoch seconds: a duration, a 0 or milliseconds is refused (a unit mistake upstream).
_EPOCH_MIN = 946684800.0  # 2000-01-01
_EPOCH_MAX = 4102444800.0  # 2100-01-01: beyond it, milliseconds


def named_entries(entries, checker, holds, option="nodes"):
    """``(entry, check)`` for each entry of a list option whose entries are mappings named by ``name``, each named once.

    ``checker(node, index)`` makes the entry's checker; ``holds`` says what an entry holds, for the error. A node given
    twice is refused: counting both would count it twice, and keeping one would hide the other's data.
    """
    first = {}
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        check = checker(name if isinstance(name, str) else None, index)
        if not isinstance(entry, Mapping):
            check.fail("the entry", f"must be a mapping with {holds}, not {type(entry).__name__}")
        check.text(name, "name", optional=False)
        if name in first:
            check.fail("name", f"{name!r} is given twice (also {option}[{first[name]}])", "give each node once")
        first[name] = index
        yield entry, check


class RecordError(GpufleetError):
    """A record is not what the rollout writes; nothing was written."""

    def __init__(self, msg, node=None, field=None):
        super().__init__(msg, node=node, field=field)


class _Checker:
    """Checks the fields of one entry of a list option; each error names the entry, its node, the field and the fix."""

    def __init__(self, node, index, option="records", fix="pass the records the rollout writes (docs/rollout_report.md)"):
        self.node = node
        self.where = f"{option}[{index}]" + (f" (node {node})" if node else "")
        self.fix = fix

    def fail(self, field, what, fix=None):
        raise RecordError(f"{self.where}: {field} {what}: {fix or self.fix}", node=self.node, field=field)

    def mapping(self, value, field):
        """``value`` as a mapping; None is the empty one."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(field, f"must be a mapping, not {type(value).__name__}")
        return value

    def keys(self, value, spec, field):
        """``field`` is a mapping with the keys of ``spec`` (True: required); the error names the first bad key as the field."""
        if not isinstance(value, dict):
            self.fail(field, f"must be a mapping, not {type(value).__name__}")
        prefix = "" if field == "the record" else field + "."
        unknown = sorted(str(k) for k in value if k not in spec)
        if unknown:
            self.fail(prefix + unknown[0], "is not a field of {} (unknown: {}; allowed: {})".format(field, ", ".join(unknown), ", ".join(spec)))
        missing = [k for k, required in spec.items() if required and k not in value]
        if missing:
            self.fail(prefix + missing[0], "is missing from {} (required: {})".format(field, ", ".join(k for k, r in spec.items() if r)))

    def text(self, value, field, optional=True):
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self.fail(field, f"must be a string, not {type(value).__name__}")
        return value

    def choice(self, value, choices, field):
        if not isinstance(value, str) or value not in choices:
            shown = value if isinstance(value, str) and len(value) <= 40 else type(value).__name__
            self.fail(field, "is {!r}: one of {} expected".format(shown, ", ".join(choices)))
        return value

    def time(self, value, field):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(field, f"must be a number (epoch seconds), not {type(value).__name__}")
        if not math.isfinite(value):
            self.fail(field, f"is {value}: a finite number of epoch seconds expected")
        if not _EPOCH_MIN <= value < _EPOCH_MAX:
            self.fail(field, f"is {value}: epoch seconds (between 2000 and 2100) expected, not a duration or milliseconds")
        return float(value)


def _versions(check, value, field):
    if value is None:
        return {}
    if not isinstance(value, dict):
        check.fail(field, f"must be a mapping of component to version, not {type(value).__name__}")
    out = {}
    for key, version in value.items():
        if not isinstance(key, str) or not _COMPONENT.fullmatch(key):
            check.fail(field, f"has a component name {key!r} that is not a plain name")
        if key == "nic_firmware":
            nics = {} if version is None else version
            if not isinstance(nics, dict):
                check.fail(f"{field}.nic_firmware", f"must be a mapping of PSID to version, not {type(nics).__name__}")
            for psid, fw in nics.items():
                if not isinstance(psid, str) or not isinstance(fw, str):
                    check.fail(f"{field}.nic_firmware", "maps PSID strings to version strings")
            out[key] = dict(sorted(nics.items()))
        else:
            out[key] = check.text(version, f"{field}.{key}")
    return out


def _phase(check, value, index, field="phases"):
    where = f"{field}[{index}]"
    check.keys(value, PHASE_KEYS, where)
    name = check.choice(value["name"], PHASES, f"{where}.name")
    status = check.choice(value["status"], PHASE_STATUSES, f"{where}.status")
    start = check.time(value["start"], f"{where}.start")
    end = value.get("end")
    if end is None:
        if status != "started":
            check.fail(f"{where}.end", f"is missing but the phase {name} is {status}: a closed phase has an end time")
    else:
        end = check.time(end, f"{where}.end")
        if end < start:
            check.fail(f"{where}.end", f"({end}) is before its start ({start}) in phase {name}")
    return {"name": name, "start": start, "end": end, "status": status, "detail": check.text(value.get("detail"), f"{where}.detail") or ""}


def _check(check, value, index):
    where = f"checks[{index}]"
    check.keys(value, CHECK_KEYS, where)
    out = {
        "name": check.text(value["name"], f"{where}.name", optional=False),
        "status": check.choice(value["status"], CHECK_STATUSES, f"{where}.status"),
        "message": check.text(value.get("message"), f"{where}.message") or "",
    }
    for key in ("observed", "expected"):
        if key in value:
            out[key] = value[key]
    return out


def validate_record(record, index, rollout_id):
    """A normalised copy of one record; RecordError naming the node and the field when it is not one."""
    node = record.get("node") if isinstance(record, dict) else None
    check = _Checker(node if isinstance(node, str) and len(node) <= 128 else None, index)
    check.keys(record, RECORD_KEYS, "the record")
    if not isinstance(node, str) or not NODE_NAME.fullmatch(node):
        check.fail("node", f"{node!r} is not a plain host name", "use the inventory name (letters, digits, '.', '_', '-'; at most 128)")
    if record["rollout_id"] != rollout_id:
        check.fail("rollout_id", f"is {record['rollout_id']!r}, not this report's {rollout_id!r}", "pass the records of this rollout only")
    wave = record.get("wave")
    if wave is not None and (isinstance(wave, bool) or not isinstance(wave, int) or wave < 0):
        check.fail("wave", f"is {wave!r}: 0 (canary), 1, 2... or null (not planned) expected")
    domain = record.get("domain") or {}
    if not isinstance(domain, dict) or not all(isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool) for k, v in domain.items()):
        check.fail("domain", "must map host variable names to their values (strings)")
    phases = record.get("phases") or []
    if not isinstance(phases, list):
        check.fail("phases", f"must be a list, not {type(phases).__name__}")
    checks = record.get("checks") or []
    if not isinstance(checks, list):
        check.fail("checks", f"must be a list, not {type(checks).__name__}")
    rollback = record.get("rollback")
    if rollback is not None:
        check.keys(rollback, ROLLBACK_KEYS, "rollback")
        rollback = {
            "decided_by": check.text(rollback["decided_by"], "rollback.decided_by", optional=False),
            "reason": check.text(rollback["reason"], "rollback.reason", optional=False),
            "result": check.choice(rollback["result"], ROLLBACK_RESULTS, "rollback.result"),
        }
    drain = record.get("drain")
    if drain is not None:
        check.keys(drain, DRAIN_KEYS, "drain")
        if not isinstance(drain["ours"], bool):
            check.fail("drain.ours", f"must be true or false, not {type(drain['ours']).__name__}")
        drain = {"ours": drain["ours"], "reason": check.text(drain.get("reason"), "drain.reason") or ""}
    out = {
        "node": node,
        "rollout_id": rollout_id,
        "wave": wave,
        "domain": {k: str(v) for k, v in sorted(domain.items())},
        "result": check.choice(record["result"], RESULTS, "result"),
        "before": _versions(check, record.get("before"), "before"),
        "after": _versions(check, record.get("after"), "after"),
        "phases": [_phase(check, phase, i) for i, phase in enumerate(phases)],
        "checks": [_check(check, item, i) for i, item in enumerate(checks)],
        "rollback": rollback,
        "drain": drain,
        "skip_reason": check.text(record.get("skip_reason"), "skip_reason"),
    }
    if out["result"] == "rolled_back" and rollback is None:
        check.fail("rollback", "is null but the result is rolled_back", "say who decided the rollback and why (decided_by, reason, result)")
    return out


def validate_records(records, rollout_id):
    """Normalised records, sorted by (wave, node); RecordError on the first bad one or a node given twice."""
    if not isinstance(records, list):
        raise RecordError(f"records must be a list, not {type(records).__name__}", field="records")
    out = []
    seen = set()
    for index, record in enumerate(records):
        checked = validate_record(record, index, rollout_id)
        if checked["node"] in seen:
            raise RecordError(
                f"records[{index}] (node {checked['node']}): node is given twice: pass one record per node", node=checked["node"], field="node"
            )
        seen.add(checked["node"])
        out.append(checked)
    return out


# --------------------------------------------------------------------------- secrets


def _redact_text(text, secrets, found):
    def one(url):
        if secret_in_url(url):
            found.append(True)
            return redact_url(url)
        return url

    if "://" in text:
        text = sub_urls(text, one)
    for secret in secrets:
        if secret in text:
            found.append(True)
            text = text.replace(secret, REDACTED)
    return text


def credentials_in(value):
    """Every URL in ``value`` (its strings and keys, at any depth) that carries a credential, as written there.

    The module adds them to ``no_log_values`` before anything can fail, so that its invocation echoes none of them.
    """
    urls, stack = set(), [value]

    def keep(url):
        if secret_in_url(url):
            urls.add(url)
        return url

    while stack:  # a loop, not recursion: the records are checked after this, and may be nested without bound
        item = stack.pop()
        if isinstance(item, str):
            if "://" in item:
                sub_urls(item, keep)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return urls


# The options that can hold free text, and so a credential: no_log as a whole, so that AnsibleModule's "Invoked with"
# line (syslog, the journal) shows NOT_LOGGING_PARAMETER for them. It is written before main() can look at them, and
# it masks only the user:password@ form itself: a signed query or an escaped character reaches it in clear otherwise.
NOT_LOGGED = ("dest", "rollout_id", "records", "plan", "summary_extra", "title", "generated_at")


def settle_no_log_values(no_log_values, params):
    """``no_log_values`` (AnsibleModule's, once built) holding what rollout_report masks: its ``secrets`` and the
    credentials :func:`credentials_in` finds, not the host names and times the :data:`NOT_LOGGED` options registered.

    Masking those would star every node name in the result, one pass over the result per value (10,000 records register
    hundreds of thousands). A value that is also a secret or a credential stays.
    """
    no_log_values.difference_update(no_log_leaves([params.get(name) for name in NOT_LOGGED]))
    secrets = [secret for secret in params.get("secrets") or () if isinstance(secret, str)]
    no_log_values.update(masked_forms(secrets) | masked_forms(credentials_in(params)))
    return no_log_values


def redact(value, secrets=(), found=None):
    """``value`` with every URL that carries a credential redacted and every string of ``secrets`` replaced.

    ``found`` (a list) gets one entry per redaction, so that the caller can warn without showing the value.
    """
    found = [] if found is None else found
    if isinstance(value, str):
        return _redact_text(value, secrets, found)
    if isinstance(value, dict):
        return {(_redact_text(k, secrets, found) if isinstance(k, str) else k): redact(v, secrets, found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(item, secrets, found) for item in value]
    return value
