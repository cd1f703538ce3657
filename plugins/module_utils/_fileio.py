# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Durable file writes shared by the node state file and the report writer, and the modes of what they create (private).

Modes (reports hold hostnames, BMC inventories and error messages; their folder may be shared, ``/tmp/reports``):

- a new file is ``0640`` (less what the umask takes away), a folder created for it ``0750``;
- a file that replaces one the same user owns keeps that file's read and write bits for its owner and group, never
  its execute, world, setuid, setgid or sticky bits (a report written by an older version at ``0644`` becomes ``0640``);
- a file that replaces one planted by another user takes nothing from it: it is new (``0640``).
"""

from __future__ import annotations

import os

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

FILE_MODE = 0o640
FOLDER_MODE = 0o750
# What a user's own earlier file may pass on to the file that replaces it; the owner always reads and writes its file.
_INHERITABLE = 0o660
_OWNER_RW = 0o600


def replacement_mode(existing, euid, umask):
    """The mode of a file written at a path: ``existing`` is ``(mode, uid)`` of the regular file there, or None.

    ``euid`` is the writer's effective uid, ``umask`` its umask (applied to new files only, as ``open`` does).
    """
    if existing is not None:
        mode, uid = existing
        if uid == euid:
            return (mode & _INHERITABLE) | _OWNER_RW
    return (FILE_MODE & ~umask) | _OWNER_RW


def current_umask():
    """The process's umask (read by setting it back at once)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def make_folders(path, mode=FOLDER_MODE):
    """Create ``path`` and each missing folder above it with ``mode`` (less the umask); existing folders are left as they are."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise


def fsync_folder(folder):
    """fsync a folder, so that a rename in it survives a power loss."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
