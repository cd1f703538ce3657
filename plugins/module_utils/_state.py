# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node state file ``/etc/ansible/facts.d/gpufleet.fact`` (private: may change without notice).

A JSON document that Ansible also reads as ``ansible_local.gpufleet``::

    {
      "schema": 1,
      "last_known_good": {"driver": {"version": "550.90.07", "method": "runfile", ..., "recorded_at": "..."},
                          "fabricmanager": {"version": "550.90.07", ...}},
      "rollout": {"id": "2024-06-rollout", "phase": "driver", "updated_at": "..."},
      "history": [{"time", "component", "action", "before", "after", "result", "rollout_id", "details"}]
    }

The functions on documents (``record_last_known_good``, ``append_history``, ``set_phase``) are pure
(they change the dict they get and say whether anything changed); ``load``, ``save`` and ``update`` do
the I/O.

Files beside the state file ``P`` (only ``P`` ends in ``.fact``: Ansible reads every ``*.fact`` in
``facts.d`` as a fact):

- ``P.lock``: the lock. ``update`` holds an exclusive ``fcntl.flock`` on it around load, change and
  save, so that several writers on one node (driver, firmware, the rollout phase) lose no update.
  The wait is bounded (``LOCK_TIMEOUT`` seconds) yet queued in the kernel (a blocking flock in a
  daemon thread, abandoned at the deadline: polling with ``LOCK_NB`` starved waiters for seconds):
  then :class:`LockTimeout` names the lock file and the holder (pid, host, purpose, since when,
  recorded in the lock file while it is held). Files are opened close-on-exec, so a command
  started while the lock is held does not inherit it. The lock file
  is never removed (removing a lock file races with its next holder); a lock whose file was
  replaced while waiting is taken again on the new file. :func:`locked` is the reusable helper.
  ``load`` takes no lock: the file is only ever replaced by a rename, so a reader sees a whole old
  or a whole new document.
- ``P.prev``: the previous document. ``save`` copies the current file there (when it is a valid
  document: a damaged file never replaces a good previous copy) before replacing ``P``.
- ``.gpufleet.*.tmp``: ``save`` writes into a ``mkstemp`` file in the same folder, fsyncs it, sets
  mode 0644, renames it over the target, and fsyncs the folder, so a node that loses power
  mid-write keeps the previous document.

Only a missing file means a new node. Anything else that is not a valid document is damage and
raises :class:`StateFileError` with a message that names what is wrong (the key, as
``last_known_good.driver.version`` or ``history[3].result``) and how to repair it (check the
previous copy with ``python3 -m json.tool`` and copy it over, or move the file aside, and rollback
then loses its last known good versions); the file is never reset silently. Damage is: an empty or
whitespace-only file, bytes that are not UTF-8, JSON that does not parse (NaN and a key given twice
included), a file larger than ``MAX_BYTES``, nesting deeper than ``MAX_DEPTH``, not a regular file
(a symbolic link included: the rename would replace the link, not its target), a ``schema`` other
than 1, and a known key of the wrong type: ``last_known_good`` an object of objects, each with a
whole ``version`` (``_version.is_driver_version`` for the driver and the fabric manager), ``method``
``runfile`` or ``package`` and ``kernel_module`` ``open`` or ``proprietary`` where given;
``rollout`` an object whose ``id``, ``phase`` and ``updated_at`` are strings or null (and, as the
rollout_state module writes them: ``owner`` a string, ``acquired_at`` / ``heartbeat_at`` epoch seconds,
``wave`` a whole number, ``status`` one of ROLLOUT_STATUSES, ``result`` one of ROLLOUT_RESULTS, all or
null, ``phases`` a list of ``{"name", "start", "end", "status", "detail"}``, ``detail`` a string, ``before`` an object
(the versions before the rollout changed the node) and ``rollback`` ``{"decided_by", "reason", "result"}`` with
``result`` one of ROLLBACK_RESULTS, or null); ``history`` a
list of objects whose known keys have the types ``append_history`` writes. Unknown keys are kept.
``save`` refuses (and writes nothing) a document that ``load`` would refuse.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import errno
import fcntl
import json
import math
import os
import re
import socket
import stat
import tempfile
import threading
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._fileio import O_CLOEXEC, fsync_folder

DEFAULT_PATH = "/etc/ansible/facts.d/gpufleet.fact"
SCHEMA = 1
HISTORY_LIMIT = 200
COMPONENTS = ("driver", "fabricmanager", "gpu_firmware", "nic_firmware")
DRIVER_COMPONENTS = ("driver", "fabricmanager")

MAX_BYTES = 4 * 1024 * 1024  # 200 history entries with 500-character messages are about 250 KiB
MAX_DEPTH = 32  # the document itself needs 5 levels (history, entry, details, a value)
LOCK_TIMEOUT = 30  # seconds; a holder keeps the lock for one load-change-save, milliseconds
MAX_LOCK_TIMEOUT = 3600
LOCK_SUFFIX = ".lock"
PREV_SUFFIX = ".prev"
STATE_MODE = 0o644

_COMPONENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_FIRMWARE_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:~-]{0,127}")
_ENTRY_CHOICES = {"method": ("runfile", "package"), "kernel_module": ("open", "proprietary")}
_HISTORY_STRINGS = ("time", "component", "action", "result")
_HISTORY_OPTIONAL_STRINGS = ("before", "after", "rollout_id")
# The rollout lock and phases (written by rollout_state): "running" holds the node, "done" and "released" free it.
ROLLOUT_STATUSES = ("running", "done", "released")
ROLLOUT_RESULTS = ("upgraded", "unchanged", "rolled_back", "failed_drained", "skipped")
PHASE_STATUSES = ("started", "ok", "failed", "skipped")
# How a rollback ended (rollout.rollback.result): validated (the node resumed) or failed (left drained).
ROLLBACK_RESULTS = ("validated", "failed")


class StateFileError(GpufleetError):
    """The state file exists but cannot be read or written, or is damaged."""

    def __init__(self, msg, path=None):
        super().__init__(msg, path=path)
        self.path = path


class StateValueError(StateFileError, ValueError):
    """A value the state file must not hold (a cut-off version): refused before anything is written."""


class LockTimeout(StateFileError):
    """Another task held the lock for longer than the bounded wait."""


class _Invalid(ValueError):
    """One thing wrong with a document: ``where`` is the key path, ``what`` the problem."""

    def __init__(self, where, what):
        super().__init__(f"{where} {what}" if where else what)
        self.where = where


class _Newer(_Invalid):
    """A document of a later schema: not damage, but nothing this version may read or rewrite."""

    def __init__(self, schema):
        super().__init__("", f"has schema {schema}: a newer gpufleet.lifecycle wrote it (this one reads schema {SCHEMA})")


def now_iso():
    """UTC time stamp with seconds, as written into the document."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def empty():
    return {"schema": SCHEMA, "last_known_good": {}, "rollout": {"id": None, "phase": None, "updated_at": None}, "history": []}


def lock_path(path):
    """The lock file of the state file ``path`` (beside it; not a ``.fact``)."""
    return path + LOCK_SUFFIX


def prev_path(path):
    """Where ``save`` keeps the previous document of ``path``."""
    return path + PREV_SUFFIX


# -- checking documents --------------------------------------------------------------------------


def _describe(value):
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), f"a {type(value).__name__}")


def _json_ok(data):
    """True when ``data`` is plain JSON (str keys, finite numbers) nested at most MAX_DEPTH; linear, no recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return False
                stack.append((item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                return False
        elif not (value is None or isinstance(value, (str, int))):
            return False
    return True


def _check_json(data):
    """``_json_ok`` or _Invalid naming the first place that is not; the key paths are built only then (they cost)."""
    if _json_ok(data):
        return
    stack = [(data, "", 1)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _Invalid("", f"is nested more than {MAX_DEPTH} levels deep (at {where or 'the top'})")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _Invalid(where or "the document", f"has a key {key!r} that is not a string")
                stack.append((item, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{where}[{index}]", depth + 1) for index, item in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise _Invalid(where, f"is {value!r}, which JSON cannot hold")
        elif not (value is None or isinstance(value, (str, int))):
            raise _Invalid(where, f"is {_describe(value)} ({value!r}), not a JSON value")


def _optional_string(value, where):
    if value is not None and not isinstance(value, str):
        raise _Invalid(where, f"must be a string or null, not {_describe(value)} ({value!r})")


def _check_entry(component, entry):
    where = f"last_known_good.{component}"
    if not _COMPONENT_NAME.fullmatch(component):
        raise _Invalid(where, "is not a component name (lower-case letters, digits and _)")
    if not isinstance(entry, dict):
        raise _Invalid(where, f"must be an object with a version, not {_describe(entry)} ({json.dumps(entry)[:80]})")
    version = entry.get("version")
    if component in DRIVER_COMPONENTS:
        if not _version.is_driver_version(version):
            raise _Invalid(f"{where}.version", f"{version!r} is not a whole NVIDIA driver version (for example 550.90.07)")
    elif not (isinstance(version, str) and _FIRMWARE_VERSION.fullmatch(version)):
        raise _Invalid(f"{where}.version", f"{version!r} is not a version (letters, digits and . _ + : ~ -)")
    for key, choices in _ENTRY_CHOICES.items():
        if entry.get(key) is not None and entry[key] not in choices:
            raise _Invalid(f"{where}.{key}", f"is {entry[key]!r}, expected one of {', '.join(choices)} or null")
    _optional_string(entry.get("recorded_at"), f"{where}.recorded_at")


def _check_history_entry(index, entry):
    where = f"history[{index}]"
    if not isinstance(entry, dict):
        raise _Invalid(where, f"must be an object, not {_describe(entry)}")
    for key in _HISTORY_STRINGS:
        if key in entry and not isinstance(entry[key], str):
            raise _Invalid(f"{where}.{key}", f"must be a string, not {_describe(entry[key])} ({entry[key]!r})")
    for key in _HISTORY_OPTIONAL_STRINGS:
        _optional_string(entry.get(key), f"{where}.{key}")
    if entry.get("details") is not None and not isinstance(entry["details"], dict):
        raise _Invalid(f"{where}.details", f"must be an object or null, not {_describe(entry['details'])}")


def _optional_number(value, where):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _Invalid(where, f"must be a number (epoch seconds) or null, not {_describe(value)} ({value!r})")


def _optional_choice(value, where, choices):
    if value is not None and value not in choices:
        raise _Invalid(where, f"is {value!r}, expected one of {', '.join(choices)} or null")


def _check_rollout_lock(rollout):
    """The keys the rollout_state module writes into ``rollout`` (owner, lock times, wave, status, result, phases)."""
    _optional_string(rollout.get("owner"), "rollout.owner")
    for key in ("acquired_at", "heartbeat_at"):
        _optional_number(rollout.get(key), f"rollout.{key}")
    wave = rollout.get("wave")
    if wave is not None and (isinstance(wave, bool) or not isinstance(wave, int) or wave < 0):
        raise _Invalid("rollout.wave", f"must be a whole number of at least 0 or null, not {wave!r}")
    _optional_choice(rollout.get("status"), "rollout.status", ROLLOUT_STATUSES)
    _optional_choice(rollout.get("result"), "rollout.result", ROLLOUT_RESULTS)
    phases = rollout.get("phases", [])
    if not isinstance(phases, list):
        raise _Invalid("rollout.phases", f"must be a list, not {_describe(phases)}")
    for index, phase in enumerate(phases):
        where = f"rollout.phases[{index}]"
        if not isinstance(phase, dict):
            raise _Invalid(where, f"must be an object, not {_describe(phase)}")
        if not isinstance(phase.get("name"), str) or not phase["name"]:
            raise _Invalid(f"{where}.name", f"must be a phase name, not {phase.get('name')!r}")
        for key in ("start", "end"):
            _optional_number(phase.get(key), f"{where}.{key}")
        if phase.get("status") not in PHASE_STATUSES:
            raise _Invalid(f"{where}.status", f"is {phase.get('status')!r}, expected one of {', '.join(PHASE_STATUSES)}")
        _optional_string(phase.get("detail"), f"{where}.detail")
    _optional_string(rollout.get("detail"), "rollout.detail")
    before = rollout.get("before")
    if before is not None and not isinstance(before, dict):
        raise _Invalid("rollout.before", f"must be an object of component versions or null, not {_describe(before)}")
    rollback = rollout.get("rollback")
    if rollback is not None:
        if not isinstance(rollback, dict):
            raise _Invalid("rollout.rollback", f"must be an object (decided_by, reason, result) or null, not {_describe(rollback)}")
        for key in ("decided_by", "reason"):
            if not isinstance(rollback.get(key), str):
                raise _Invalid(f"rollout.rollback.{key}", f"must be a string, not {_describe(rollback.get(key))}")
        if rollback.get("result") not in ROLLBACK_RESULTS:
            raise _Invalid("rollout.rollback.result", f"is {rollback.get('result')!r}, expected one of {', '.join(ROLLBACK_RESULTS)}")


def _check_shape(data):
    """The known keys of a document have their types (see the module docstring); unknown keys pass."""
    if not isinstance(data, dict):
        raise _Invalid("", f"holds JSON but not an object ({_describe(data)})")
    schema = data.get("schema", SCHEMA)
    if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
        raise _Invalid("schema", f"must be the number {SCHEMA}, not {schema!r}")
    if schema > SCHEMA:
        raise _Newer(schema)
    lkg = data.get("last_known_good", {})
    if not isinstance(lkg, dict):
        raise _Invalid("last_known_good", f"must be an object of components, not {_describe(lkg)}")
    for component, entry in lkg.items():
        _check_entry(component, entry)
    rollout = data.get("rollout", {})
    if not isinstance(rollout, dict):
        raise _Invalid("rollout", f"must be an object with id and phase, not {_describe(rollout)} ({json.dumps(rollout)[:80]})")
    for key in ("id", "phase", "updated_at"):
        _optional_string(rollout.get(key), f"rollout.{key}")
    _check_rollout_lock(rollout)
    history = data.get("history", [])
    if not isinstance(history, list):
        raise _Invalid("history", f"must be a list, not {_describe(history)}")
    for index, entry in enumerate(history):
        _check_history_entry(index, entry)


def _normalise(data):
    doc = copy.copy(data)
    doc.setdefault("schema", SCHEMA)
    doc.setdefault("last_known_good", {})
    doc.setdefault("history", [])
    rollout = dict(doc.get("rollout") or {})
    for key in ("id", "phase", "updated_at"):
        rollout.setdefault(key, None)
    doc["rollout"] = rollout
    return doc


# -- reading -----------------------------------------------------------------------------------------


def _repair_hint(path):
    prev = prev_path(path)
    try:
        has_prev = stat.S_ISREG(os.lstat(prev).st_mode)
    except OSError:
        has_prev = False
    if has_prev:
        first = f"the previous copy is {prev}: check it with `python3 -m json.tool {prev}` and copy it over {path}"
    else:
        first = f"there is no previous copy ({prev}): check the file with `python3 -m json.tool {path}` and fix it"
    return (
        f"To repair: {first}; or move it aside (mv {path} {path}.damaged) to start a new node state, and rollback then loses "
        "its last known good versions. gpufleet does not reset the file by itself"
    )


def _damaged(path, problem):
    return StateFileError(f"the node state file {path} {problem}. {_repair_hint(path)}", path)


def _read(path):
    """The bytes of ``path`` (at most MAX_BYTES + 1), or None when it does not exist; refuses what is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateFileError(
                f"the node state file {path} is a symbolic link: gpufleet replaces the file by a rename, which would replace the link "
                "and not its target. Point state_file at the file itself",
                path,
            ) from exc
        raise StateFileError(f"cannot read the node state file {path}: {exc}", path) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a device or socket"
            raise StateFileError(f"the node state file {path} is {kind}, not a regular file: move it aside or point state_file elsewhere", path)
        chunks = []
        size = 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, min(1024 * 1024, MAX_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise StateFileError(f"cannot read the node state file {path}: {exc}", path) from exc
    finally:
        os.close(fd)


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(f"holds the key {key!r} twice in one object (which one counts is unclear)")
        result[key] = value
    return result


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON value")


def _parse(raw, path):
    """The checked document in ``raw``, or StateFileError naming the damage."""
    if len(raw) > MAX_BYTES:
        raise _damaged(path, f"is larger than {MAX_BYTES // (1024 * 1024)} MiB, far more than a node state needs")
    if not raw.strip():
        raise _damaged(path, "is empty (or only whitespace): it is damaged, not a new node (a new node has no file)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _damaged(path, f"is not UTF-8 text (at byte offset {exc.start}: 0x{raw[exc.start]:02x})") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _DuplicateKey as exc:
        raise _damaged(path, str(exc)) from None
    except RecursionError:
        raise _damaged(path, f"is nested too deeply to read (more than {MAX_DEPTH} levels are never written)") from None
    except ValueError as exc:
        raise _damaged(path, f"is not valid JSON ({exc})") from None
    try:
        _check_json(data)
        _check_shape(data)
    except _Newer as exc:
        raise StateFileError(
            f"the node state file {path} {exc}: run the collection version that wrote it against this node, or upgrade this one. "
            "Do not move the file aside: rollback would lose its last known good versions",
            path,
        ) from None
    except _Invalid as exc:
        raise _damaged(path, f"is damaged: {exc}" if exc.where else str(exc)) from None
    return _normalise(data)


def load(path=DEFAULT_PATH):
    """The document at ``path``; an empty document when the file does not exist (a new node). StateFileError for damage."""
    raw = _read(path)
    if raw is None:
        return empty()
    return _parse(raw, path)


# -- writing -------------------------------------------------------------------------------------------


def _replace_with(target, folder, raw):
    """Write ``raw`` to a new temporary file in ``folder``, fsync it and rename it over ``target``."""
    fd, tmp = tempfile.mkstemp(prefix=".gpufleet.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fchmod(handle.fileno(), STATE_MODE)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _valid(raw, path):
    try:
        _parse(raw, path)
    except StateFileError:
        return False
    return True


def _encode(path, data):
    """The bytes ``save`` writes for ``data``, or StateFileError when ``load`` would refuse them."""
    try:
        _check_json(data)
        _check_shape(data)
    except _Invalid as exc:
        raise StateFileError(f"refusing to write the node state file {path}: the document {exc}", path) from None
    raw = (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
    if len(raw) > MAX_BYTES:
        raise StateFileError(f"refusing to write the node state file {path}: the document is larger than {MAX_BYTES // (1024 * 1024)} MiB", path)
    return raw


def _write(path, raw, previous):
    """Keep ``previous`` (the current file's bytes, when valid) as ``path.prev``, then replace ``path`` with ``raw``."""
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        if previous is not None and previous != raw:
            _replace_with(prev_path(path), folder, previous)
        _replace_with(path, folder, raw)
        fsync_folder(folder)
    except OSError as exc:
        raise StateFileError(f"cannot write the node state file {path}: {exc}", path) from exc


def save(path, data):
    """Write ``data`` to ``path`` atomically (mode 0644, folder created when missing), keeping the previous document as ``path.prev``.

    Refuses (StateFileError, nothing written) a document that ``load`` would refuse, and a ``path``
    that is a symbolic link or not a regular file. A damaged current file is replaced (the caller
    asked for it) but never becomes the previous copy.
    """
    raw = _encode(path, data)
    current = _read(path)
    _write(path, raw, current if current is not None and _valid(current, path) else None)


# -- the lock --------------------------------------------------------------------------------------------


def _check_lock_timeout(timeout, path):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_LOCK_TIMEOUT:
        raise StateFileError(f"the lock timeout must be a number of seconds above 0 and at most {MAX_LOCK_TIMEOUT}, got {timeout!r}", path)
    return timeout


def _open_lock(path):
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | O_CLOEXEC, STATE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateFileError(f"the lock file {path} is a symbolic link: remove it (gpufleet creates a regular file there)", path) from exc
        raise StateFileError(f"cannot open the lock file {path}: {exc}", path) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StateFileError(f"the lock file {path} is not a regular file: move it aside", path)
    return fd


def _holder_of(path):
    """Who holds the lock, as its holder recorded it in the lock file."""
    try:
        with open(path, "rb") as handle:
            info = json.loads(handle.read(4096).decode("utf-8"))
        pid = info["pid"]
        # locked() records its own pid, an int: kill(0, 0) or kill(-1, 0) would succeed for a process group, not a holder.
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ValueError("not a process id")
        os.kill(pid, 0)  # a recorded holder that is gone is no holder (a plain flock of another tool holds it)
    except (ValueError, KeyError, TypeError, OSError, OverflowError, RecursionError):
        # Whatever the file holds (another tool's text, "[[[[...", a pid too large for kill): the holder is not known.
        return "holder not recorded"
    return f"pid {pid} on {info.get('host')}, {info.get('purpose') or 'purpose not recorded'}, since {info.get('since')}"


def _same_file(fd, path):
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class _Waiter(threading.Thread):
    """A blocking ``flock`` in a thread, so that the wait is bounded yet queued in the kernel.

    Polling with LOCK_NB sleeps through most releases, and a writer that releases and locks again
    at once starves the others (seconds with 4 busy writers); a blocked flock is woken at the
    release. After an abandoned wait the thread owns the file: it closes it (releasing the lock
    if it got it) whenever its flock returns.
    """

    def __init__(self, fd):
        super().__init__(name="gpufleet-flock", daemon=True)
        self.fd = fd
        self.error = None
        self._guard = threading.Lock()
        self._done = threading.Event()
        self._abandoned = False

    def run(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self._guard:
            if self._abandoned:
                os.close(self.fd)
                return
            self._done.set()

    def wait_for(self, seconds):
        """True when the flock returned (``error`` says how); False when abandoned (the thread owns the file now)."""
        if self._done.wait(seconds):
            return True
        with self._guard:
            if self._done.is_set():
                return True
            self._abandoned = True
            return False


def _flock(fd, path, deadline):
    """Lock ``fd`` before ``deadline``: True; False when abandoned to a waiter thread (which then owns ``fd``)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    except OSError as exc:
        raise StateFileError(f"cannot lock {path}: {exc}", path) from exc
    waiter = _Waiter(fd)
    waiter.start()
    if not waiter.wait_for(max(0.0, deadline - time.monotonic())):
        return False
    if waiter.error is not None:
        raise StateFileError(f"cannot lock {path}: {waiter.error}", path)
    return True


@contextlib.contextmanager
def locked(path, timeout=LOCK_TIMEOUT, purpose=None):
    """Hold an exclusive ``flock`` on the lock file ``path`` (created when missing) for the ``with`` body.

    Waits at most ``timeout`` seconds (never an unbounded block), then raises LockTimeout naming the
    lock file and its holder. The holder's pid, host, ``purpose`` and start are written into the lock
    file while it is held, for that message. Released on every exit (closing the file).
    """
    seconds = _check_lock_timeout(timeout, path)
    deadline = time.monotonic() + seconds
    fd = _open_lock(path)
    try:
        while True:
            if not _flock(fd, path, deadline):
                holder = _holder_of(path)
                fd = None  # the waiter thread owns it now
                raise LockTimeout(
                    f"timed out after {seconds:g} s waiting for the lock {path}: another gpufleet task holds it ({holder}). "
                    f"Let it finish and rerun; if no gpufleet task runs on this node, find the holder with `fuser -v {path}`",
                    path,
                )
            if _same_file(fd, path):
                break
            # the file was removed or replaced while we waited: our lock is on a name nobody else sees
            os.close(fd)
            fd = None
            fd = _open_lock(path)
        note = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose, "since": now_iso()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, note.encode("utf-8"), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        if fd is not None:
            os.close(fd)


# -- documents -------------------------------------------------------------------------------------------


def last_known_good(data, component):
    """The recorded entry for ``component`` (a dict with at least ``version``) or None."""
    entry = (data.get("last_known_good") or {}).get(component)
    return copy.deepcopy(entry) if entry else None


def record_last_known_good(data, component, version, details=None, now=None):
    """Record ``version`` (plus ``details``) as the last known good ``component``; True when that changed it.

    StateValueError (a StateFileError and a ValueError) for a version that is not whole
    (``_version.is_driver_version`` for the driver and the fabric manager): the file could not be
    read back, so nothing is recorded.
    """
    if not version:
        raise StateValueError(f"recording the last known good {component} needs a version")
    if component in DRIVER_COMPONENTS:
        if not _version.is_driver_version(version):
            raise StateValueError(
                f"cannot record {version!r} as the last known good {component}: it is not a whole NVIDIA driver version (for example 550.90.07)"
            )
    elif not (isinstance(version, str) and _FIRMWARE_VERSION.fullmatch(version)):
        raise StateValueError(f"cannot record {version!r} as the last known good {component}: it is not a version (letters, digits and . _ + : ~ -)")
    entry = {"version": version}
    entry.update(details or {})
    current = data.setdefault("last_known_good", {}).get(component) or {}
    if {k: v for k, v in current.items() if k != "recorded_at"} == entry:
        return False
    entry["recorded_at"] = now or now_iso()
    data["last_known_good"][component] = entry
    return True


def append_history(data, component, action, before=None, after=None, result="ok", rollout_id=None, details=None, now=None, limit=HISTORY_LIMIT):
    """Append one history entry (oldest entries dropped beyond ``limit``); returns the entry."""
    entry = {
        "time": now or now_iso(),
        "component": component,
        "action": action,
        "before": before,
        "after": after,
        "result": result,
        "rollout_id": rollout_id if rollout_id is not None else (data.get("rollout") or {}).get("id"),
    }
    if details:
        entry["details"] = details
    history = data.setdefault("history", [])
    history.append(entry)
    del history[: max(0, len(history) - limit)]
    return entry


def set_phase(data, rollout_id, phase, now=None):
    """Set the current rollout id and phase; True when either changed (the time stamp alone is no change)."""
    rollout = data.setdefault("rollout", {})
    if rollout.get("id") == rollout_id and rollout.get("phase") == phase:
        return False
    rollout.update(id=rollout_id, phase=phase, updated_at=now or now_iso())
    return True


def update(path, change, timeout=LOCK_TIMEOUT, purpose=None):
    """Under the lock ``path.lock``: load, apply ``change(doc)`` (returns True when it changed something), save when it did.

    Returns ``(changed, doc)``. A damaged file raises StateFileError before ``change`` runs; a lock
    held longer than ``timeout`` seconds raises LockTimeout; either way nothing is written.
    """
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise StateFileError(f"cannot create the folder of the node state file {path}: {exc}", path) from exc
    with locked(lock_path(path), timeout=timeout, purpose=purpose or f"updating {path}"):
        current = _read(path)
        doc = empty() if current is None else _parse(current, path)
        changed = bool(change(doc))
        if changed:
            _write(path, _encode(path, doc), current)
    return changed, doc


__all__ = [
    "DEFAULT_PATH",
    "LockTimeout",
    "StateFileError",
    "StateValueError",
    "append_history",
    "empty",
    "last_known_good",
    "load",
    "lock_path",
    "locked",
    "prev_path",
    "record_last_known_good",
    "save",
    "set_phase",
    "update",
]
