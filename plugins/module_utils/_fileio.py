# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Durable file writes shared by the node state file and the report writer (private)."""

from __future__ import annotations

import os

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fsync_folder(folder):
    """fsync a folder, so that a rename in it survives a power loss."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
