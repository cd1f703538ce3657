# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Writing report files on the controller, idempotently and safely (private).

A report folder may be shared (``/tmp/reports``, a CI workspace), so nothing in it is trusted:

- The current report is read for the "already there" comparison with ``O_NOFOLLOW`` and
  ``O_NONBLOCK``: a symbolic link at the report's name counts as "not there" (its target is never
  read, written or taken as the report) and is replaced by the report itself; a directory, pipe or
  device there fails with :class:`ReportFileError` instead of blocking or being overwritten.
- The new content goes into a fresh ``mkstemp`` file in the destination folder (``O_EXCL``, a
  random name: a link planted at any fixed temporary name is never followed), as UTF-8 whatever
  the locale, is fsynced, gets its mode from ``_fileio.replacement_mode`` (0640 for a new report;
  the read/write bits of the report it replaces only when the same user owns that one, never an
  execute, world, setuid, setgid or sticky bit: a file planted by someone else passes nothing on),
  is renamed over the report with ``os.replace``, and the folder is fsynced.
- A folder the writer creates (``dest``, the folders above it, ``dest/nodes``) is 0750; an existing
  folder is left as it is.
- Check mode reads and compares (and so reports the same failures) but writes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._fileio import O_CLOEXEC, current_umask, fsync_folder, make_folders, replacement_mode

# A file name inside dest, never a path: no "/", no "..", no hidden file.
_BASENAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


class ReportFileError(GpufleetError):
    """A report file or its folder cannot be read or written."""

    def __init__(self, msg, path=None):
        super().__init__(msg, path=path)
        self.path = path


def _kind(mode):
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    return "a device or socket"


def _current(path, size):
    """``(bytes, (mode, uid))`` of the regular file at ``path`` (at most ``size`` + 1 bytes), or ``(None, None)`` when there is none or a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link: replaced, never followed
            return None, None
        if exc.errno == errno.EISDIR:
            raise ReportFileError(f"the report {path} is a directory, not a regular file: remove it or choose another basename", path) from exc
        raise ReportFileError(f"cannot read the report {path}: {exc}", path) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReportFileError(f"the report {path} is {_kind(info.st_mode)}, not a regular file: remove it or choose another basename", path)
        chunks = []
        left = size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), (stat.S_IMODE(info.st_mode), info.st_uid)
    except OSError as exc:
        raise ReportFileError(f"cannot read the report {path}: {exc}", path) from exc
    finally:
        os.close(fd)


def _replace(module, path, data, mode):
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if module.selinux_enabled():
            module.set_default_selinux_context(tmp, False)
        os.replace(tmp, path)
        fsync_folder(folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _planned(path, content):
    """``(path, data, mode)`` to write at ``path``, or None when ``content`` is there already (in a file of ours, with its mode).

    ReportFileError when ``path`` is not a regular file (a symbolic link counts as no report) or cannot be read. A lone
    surrogate (a broken escape in a task's arguments) is written as ``\\udxxx``: it has no UTF-8 form.
    """
    data = content.encode("utf-8", "backslashreplace")
    current, existing = _current(path, len(data))
    euid = os.geteuid()
    mode = replacement_mode(existing, euid, current_umask())
    # Already there only as our own file with the mode we would give it: a planted copy (another owner, a setuid bit) is replaced.
    if current == data and existing == (mode, euid):
        return None
    return path, data, mode


def _write(module, path, data, mode):
    try:
        _replace(module, path, data, mode)
    except OSError as exc:
        raise ReportFileError(f"cannot write the report {path}: {exc}", path) from exc


def write_if_changed(module, path, content):
    """Write ``content`` to ``path`` unless it is already there; honours check mode. Returns changed.

    ReportFileError when ``path`` is not a regular file (a symbolic link is replaced, not followed)
    or cannot be written; the old report is then untouched.
    """
    planned = _planned(path, content)
    if planned is None:
        return False
    if not module.check_mode:
        _write(module, *planned)
    return True


def ensure_folder(module, dest, follow_link=True):
    """Create the folder ``dest`` (0750, and the missing folders above it) when missing (not in check mode); ReportFileError
    when it is something else.

    ``follow_link=False`` also refuses a symbolic link there (a sub-folder the module creates itself, such as
    ``dest/nodes``, is never a link to elsewhere).
    """
    if not follow_link and os.path.islink(dest):
        raise ReportFileError(f"{dest} is a symbolic link, not the report's own folder: remove it", dest)
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise ReportFileError(f"dest {dest} is not a folder: remove it or choose another dest", dest)
    if not module.check_mode and not os.path.isdir(dest):
        try:
            make_folders(dest)
        except OSError as exc:
            raise ReportFileError(f"cannot create the report folder dest {dest}: {exc}", dest) from exc


def write_reports(module, dest, basename, outputs, last=None):
    """``outputs``: ``{format: (extension, content)}``. Returns ``(changed, {format: path})``.

    Creates ``dest`` when missing (not in check mode); ReportFileError when it is not a folder. Every file is read
    before the first is written, so that a refusal (a directory where a report goes) writes none of them; ``last``
    (the top-level report, which tools read) is written after the others, so that a new one means they are new too.
    """
    if not isinstance(basename, str) or not _BASENAME.fullmatch(basename):
        raise ReportFileError(
            f"basename {basename!r} is not a plain file name: use letters, digits, '.', '_' and '-' (at most 128, not starting with '.'); "
            "choose the folder with dest",
            dest,
        )
    ensure_folder(module, dest)
    files = {}
    pending = []
    for fmt, (extension, content) in outputs.items():
        path = os.path.join(dest, f"{basename}.{extension}")
        files[fmt] = path
        planned = _planned(path, content)
        if planned is not None:
            pending.append((fmt == last, planned))
    if not module.check_mode:
        for _is_last, planned in sorted(pending, key=lambda item: item[0]):
            _write(module, *planned)
    return bool(pending), files


class ControllerFiles:
    """What :func:`write_reports` needs of an AnsibleModule, for an action plugin that writes the report in the controller's
    own process (``plugin_utils._in_process``). That runs only where SELinux is off on the controller: elsewhere the
    module runs, and labels the files as Ansible does."""

    def __init__(self, check_mode):
        self.check_mode = bool(check_mode)

    def selinux_enabled(self):
        return False
