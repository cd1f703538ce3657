# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared helpers of the tool-output parsers (private: may change without notice)."""

from __future__ import annotations

import re

# Values that NVIDIA and Mellanox tools print when a field has no value.
_MISSING = frozenset(
    (
        "",
        "n/a",
        "[n/a]",
        "not supported",
        "[not supported]",
        "not available",
        "[not available]",
        "unknown error",
        "[unknown error]",
        "insufficient permissions",
        "[insufficient permissions]",
        "requested functionality has been deprecated",
        "[requested functionality has been deprecated]",
        "none",
        "-",
    )
)

_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z/%]*)\s*$")


class ParseError(ValueError):
    """A tool printed something the parser cannot read.

    The message names the tool and what was missing or malformed.
    """


def missing(value):
    """True when a tool printed one of its "no value" markers (N/A, [Not Supported]...)."""
    return value is None or value.strip().lower() in _MISSING


def text_or_none(value):
    """The stripped text, or None when the tool reported no value."""
    if missing(value):
        return None
    return value.strip()


def number_or_none(value):
    """A number with its unit stripped ("80 C" -> 80, "1980 MHz" -> 1980, "0.5 W" -> 0.5).

    Returns None for the tools' "no value" markers and for text that is not a number.
    """
    if missing(value):
        return None
    match = _NUMBER.match(value)
    if not match:
        return None
    number = match.group(1)
    if "." in number:
        return float(number)
    return int(number)
