# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where the stop file may live: a folder only the operator (or root) controls (private).

Whoever can create the stop file halts every rollout that watches it. In a world-writable folder (``/var/tmp``, ``/tmp``)
that is anyone on the controller, and the sticky bit does not help: it stops others from removing a file, not from
creating one. So the stop file's folder must be owned by the controller user or root and not be writable by others; a
folder not made yet is judged by the nearest folder above it that exists (only who can write there can make it). A
group-writable folder is allowed: its group (an operations team) may stop the rollout.
"""

from __future__ import annotations

import os
import stat as _stat

DEFAULT = "~/.gpufleet/rollout.stop"


def problem(path, stat_of=os.stat, uid=None):
    """None when ``path`` may be the stop file; else what is wrong and what to do (names the path, never another value)."""
    uid = os.geteuid() if uid is None else uid
    if not isinstance(path, str) or not path or "\x00" in path:
        return "gpufleet_stop_file must be a path on the controller (for example ~/.gpufleet/rollout.stop)"
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        return f"gpufleet_stop_file {path!r} must be an absolute path (for example ~/.gpufleet/rollout.stop)"
    folder = os.path.dirname(os.path.normpath(path))
    fix = "set gpufleet_stop_file to a file in a folder that only you (or root) can write, such as the default ~/.gpufleet/rollout.stop"
    # A folder not made yet is as safe as the nearest folder above it that exists: only who can write there can make it.
    checked = folder
    while True:
        try:
            info = stat_of(checked)
            break
        except FileNotFoundError:
            parent = os.path.dirname(checked)
            if parent == checked:
                return f"no folder of {folder} exists: {fix}"
            checked = parent
        except OSError as exc:
            return f"the folder {checked} of gpufleet_stop_file cannot be read ({exc.strerror or exc}): {fix}"
    where = folder if checked == folder else f"{checked} (where {folder} would be made)"
    if not _stat.S_ISDIR(info.st_mode):
        return f"{checked}, on the path of gpufleet_stop_file, is not a folder: {fix}"
    if info.st_mode & _stat.S_IWOTH:
        sticky = " (the sticky bit does not stop anyone creating the file)" if info.st_mode & _stat.S_ISVTX else ""
        return (f"the folder {where} of gpufleet_stop_file is writable by everyone: anyone on the controller could create the stop "
                f"file and halt the rollout{sticky}: {fix}")
    if info.st_uid not in (uid, 0):
        return (f"the folder {where} of gpufleet_stop_file belongs to uid {info.st_uid}, not to you (uid {uid}) or root: its owner "
                f"could halt the rollout: {fix}")
    return None
