# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Writing report files on the controller, idempotently (private)."""

from __future__ import annotations

import os


def write_if_changed(module, path, content):
    """Write ``content`` to ``path`` atomically unless it is already there; honours check mode. Returns changed."""
    try:
        with open(path) as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass
    if not module.check_mode:
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(content)
        module.atomic_move(tmp, path)
    return True


def write_reports(module, dest, basename, outputs):
    """``outputs``: ``{format: (extension, content)}``. Returns ``(changed, {format: path})``."""
    if not module.check_mode and not os.path.isdir(dest):
        os.makedirs(dest)
    files = {}
    changed = False
    for fmt, (extension, content) in outputs.items():
        path = os.path.join(dest, f"{basename}.{extension}")
        files[fmt] = path
        changed |= write_if_changed(module, path, content)
    return changed, files
