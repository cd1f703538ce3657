# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVIDIA driver versions and branches: one rule for the whole collection (private).

- A driver version is whole: ``NNN.NN[N]`` or ``NNN.NN[N].NN`` (``572.61``, ``550.120``, ``550.90.07``),
  nothing around it: a trailing newline, ``384.9`` or ``550.90.7`` is refused rather than read as another version.
- ``major("572.61")`` is ``"572"``: what distribution packages are named after (``nvidia-driver-550``).
- ``driver_branch("572.61")`` is ``"R570"``: the release branch of NVIDIA's lifecycle table, which also
  numbers Windows drivers (572.x belongs to R570); an unknown major falls back to ``R<major>``.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat_data as data
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import DRIVER_VERSION_PATTERN

# One pattern with the parsers (they may import nothing above _parsers/): NNN.NN (572.61, 595.80),
# NNN.NNN (550.120, 390.157), NNN.NN.NN (550.90.07) or NNN.NNN.NN (535.161.08). Whether a two-part
# version a tool printed is a cut-off three-part one is the parser's call (it sees what follows).
_DRIVER_VERSION = re.compile(DRIVER_VERSION_PATTERN)


class VersionError(ValueError):
    """A value that is not a whole NVIDIA driver version."""


def is_driver_version(value):
    """True for a whole driver version string (``fullmatch``: no trailing newline or spaces)."""
    return isinstance(value, str) and _DRIVER_VERSION.fullmatch(value) is not None


def check_driver_version(value, what="driver version"):
    """``value`` when it is a whole driver version, else VersionError naming ``what``."""
    if not is_driver_version(value):
        raise VersionError(f"{what} {value!r} is not a whole NVIDIA driver version (expected for example 550.90.07 or 572.61)")
    return value


def version_key(value, what="driver version"):
    """``"550.90.07"`` -> ``(550, 90, 7)``, for ordering."""
    return tuple(int(part) for part in check_driver_version(value, what).split("."))


def major(value):
    """``"550.90.07"`` -> ``"550"`` (what distribution packages are named after)."""
    return check_driver_version(value).split(".", 1)[0]


def branch_of_major(number):
    """The release branch number of a driver major (572 -> 570): the newest known branch at or below it, or None."""
    known = [entry[0] for entry in data.BRANCH_LIFECYCLE if entry[0] <= number]
    if known and number - max(known) < data.BRANCH_NUMBER_WINDOW:
        return max(known)
    return None


def branch_number(value):
    """The release branch number of a driver version (None when the data knows no branch for it)."""
    return branch_of_major(int(major(value)))


def driver_branch(value):
    """``"572.61"`` -> ``"R570"``; ``R<major>`` for a major that belongs to no branch the data knows."""
    number = branch_number(value)
    return f"R{number if number is not None else major(value)}"
