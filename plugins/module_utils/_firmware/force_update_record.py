# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The record that this collection turned a BMC's ForceUpdate on (private: may change without notice).

One small JSON file per BMC (``<address>_<port>.json``, 0600, in a 0700 folder of the user that runs
nvfwupd), written and fsynced *before* ``force_update enable`` and removed once ``force_update disable``
is checked. The run that wrote it holds an flock on it until then: the kernel drops the lock when the
process dies, SIGKILL included, so a record that can be locked was left by a run that is gone, and one
that cannot belongs to a run still going. No secret goes into it.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import stat

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._fileio import O_CLOEXEC, fsync_folder

DEFAULT_FOLDER = "~/.ansible/gpufleet/nvfwupd-force-update"
MAX_BYTES = 4096


class RecordError(GpufleetError):
    """The record's folder or file cannot be trusted or written."""


class RecordBusy(RecordError):
    """Another live run holds the record: it is between force_update enable and disable on this BMC now."""


def _safe_folder(folder):
    """Create ``folder`` (0700) or check it: a real folder of this user that nobody else can write."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise RecordError(f"the ForceUpdate record folder {folder} cannot be created: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RecordError(
            f"the ForceUpdate record folder {folder} is not a folder of this user that only it can write "
            "(a link, another owner, or group/world-writable): remove it, the module creates it again"
        )


class ForceUpdateRecord:
    def __init__(self, address, port, folder=None):
        self.folder = os.path.expanduser(folder or DEFAULT_FOLDER)
        self.path = os.path.join(self.folder, f"{address}_{port}.json")
        self.fd = None

    def _lock(self, create):
        """Open and lock the file; None when there is none (and ``create`` is false). Raises RecordBusy."""
        _safe_folder(self.folder)
        flags = os.O_RDWR | os.O_NOFOLLOW | O_CLOEXEC | (os.O_CREAT if create else 0)
        while True:
            try:
                fd = os.open(self.path, flags, 0o600)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise RecordError(f"the ForceUpdate record {self.path} cannot be opened: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RecordBusy(f"another run holds the ForceUpdate record {self.path}") from None
            try:
                same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return fd
            os.close(fd)  # its holder removed it between our open and our lock: look again

    def read(self):
        """The record an earlier run left (a dict, empty when unreadable), locked until remove/release; None when there is none."""
        if self.fd is None and self._lock(create=False) is None:
            return None
        os.lseek(self.fd, 0, os.SEEK_SET)
        raw = os.read(self.fd, MAX_BYTES)
        try:
            value = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeError, RecursionError):
            value = None
        return value if isinstance(value, dict) else {}

    def write(self, **fields):
        """Write the record (durably) and keep it locked: call before force_update enable."""
        if self.fd is None:
            self._lock(create=True)
        document = {
            "force_update": "on",
            "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **fields,
        }
        raw = json.dumps(document, sort_keys=True).encode("utf-8")
        try:
            os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)
            os.write(self.fd, raw)
            os.fsync(self.fd)
            fsync_folder(self.folder)
        except OSError as exc:
            raise RecordError(f"the ForceUpdate record {self.path} cannot be written ({exc.strerror}): ForceUpdate was not turned on") from None

    def remove(self):
        """Remove the record (ForceUpdate is checked off) and drop the lock."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):  # a record left behind only makes the next run read the status and remove it
            os.unlink(self.path)
            fsync_folder(self.folder)
        self.release()

    def release(self):
        """Drop the lock, keeping the file (ForceUpdate may still be on: the next run closes it)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
