# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared helpers of the tool-output parsers (private: may change without notice)."""

from __future__ import annotations

import json
import math
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


# Driver versions, in every form NVIDIA has released: NNN.NN (418.43, Windows 572.61, Linux 595.80),
# NNN.NN.NN (550.90.07), NNN.NNN.NN (535.161.08) and NNN.NNN (390.157, and after R450 too: 550.120, which
# real nodes run, see the fabric manager mismatch fixture). A two-part form can also be the cut-off
# start of a three-part one (535.86 of 535.86.05, 535.161 of 535.161.08): only the text after it tells.
DRIVER_VERSION_PATTERN = r"[1-9][0-9]{2}\.[0-9]{2,3}(?:\.[0-9]{2})?"
# The three-part form alone: whole even where nothing follows it (the patch always has two digits).
DRIVER_VERSION_THREE_PARTS_PATTERN = r"[1-9][0-9]{2}\.[0-9]{2,3}\.[0-9]{2}"
_DRIVER_VERSION = re.compile(DRIVER_VERSION_PATTERN)
_DRIVER_VERSION_THREE_PARTS = re.compile(DRIVER_VERSION_THREE_PARTS_PATTERN)


def driver_version(text, tool, field, terminated=False, three_parts=False):
    """``text`` when it is a whole driver version, else ParseError naming ``tool`` and ``field``.

    ``terminated``: the caller saw what the tool prints after the version (a newline, the closing
    XML tag, the text that follows on the line), so the value cannot have been cut short and every
    released form counts. Without it only the three-part form is whole: ``535.161`` or ``535.86``
    may be a cut-off ``535.161.08`` / ``535.86.05``. ``three_parts``: the tool always prints the
    patch (fabric manager, R450 and later data-center drivers only).
    """
    pattern = _DRIVER_VERSION_THREE_PARTS if three_parts or not terminated else _DRIVER_VERSION
    if not isinstance(text, str) or pattern.fullmatch(text) is None:
        if isinstance(text, str) and _DRIVER_VERSION.fullmatch(text):
            why = "has no patch part: the output may be cut short (a whole one looks like 535.161.08)"
        else:
            why = "is not a whole driver version (expected for example 550.90.07, 535.161.08 or 595.80)"
        raise ParseError(f"{tool}: {field} {text!r} {why}")
    return text


def cut_line(text):
    """The last line of ``text`` when no line break ends it (it may be cut short), else None.

    Every tool ends each line it prints with a newline: a last line without one can hold a value cut
    short (``Xid 7`` of ``Xid 79``, half a UUID), which is whole only where what the tool prints after
    it is there. A parser drops such a line (a log: a cut line is no event) or refuses it (cut_short).
    """
    if not text or text.endswith(("\n", "\r")):
        return None
    return text[max(text.rfind("\n"), text.rfind("\r")) + 1 :]


def whole_lines(text):
    """``text`` without a last line that no line break ends (see cut_line): what a log reader may trust."""
    text = text or ""
    cut = cut_line(text)
    return text[: len(text) - len(cut)] if cut else text


def cut_short(tool, field, line):
    """The ParseError for a ``field`` on a last line (``line``) that no newline ends."""
    return ParseError(f"{tool}: the output was cut short in {field} (its last line {line.strip()[-120:]!r} has no newline): read it again whole")


def missing(value):
    """True when a tool printed one of its "no value" markers (N/A, [Not Supported]...)."""
    return value is None or value.strip().lower() in _MISSING


def text_or_none(value):
    """The stripped text, or None when the tool reported no value."""
    if missing(value):
        return None
    return value.strip()


def finite(number, tool, field):
    """``number`` when it is finite, else ParseError naming ``tool`` and ``field``.

    NaN and infinity (a tool's "nan" / "inf", or a figure too large for a float: 1e999) are no
    measurement, and no JSON either: a report or state file holding one cannot be read back.
    """
    if isinstance(number, float) and not math.isfinite(number):
        raise ParseError(f"{tool}: {field} is {number!r}, not a finite number: the tool printed no usable measurement, check it and run it again")
    return number


def finite_float(text, tool, field):
    """``float(text)`` of a figure a tool printed, ParseError naming ``field`` unless it is a finite number."""
    try:
        number = float(text)
    except (TypeError, ValueError) as exc:
        raise ParseError(f"{tool}: {field} {str(text)[:40]!r} is not a number") from exc
    return finite(number, tool, field)


def number_or_none(value, tool="tool output", field="a value"):
    """A number with its unit stripped ("80 C" -> 80, "1980 MHz" -> 1980, "0.5 W" -> 0.5).

    Returns None for the tools' "no value" markers and for text that is not a number; a figure
    too large for a float or an int (hundreds of digits) is a ParseError naming ``tool`` and ``field``.
    """
    if missing(value):
        return None
    match = _NUMBER.match(value)
    if not match:
        return None
    number = match.group(1)
    if "." in number:
        return finite(float(number), tool, field)
    try:
        return int(number)
    except ValueError as exc:  # more digits than int() converts (4,300)
        raise ParseError(f"{tool}: {field} has {len(number)} digits, not a number a tool prints") from exc


def _non_finite_path(value, path="the document"):
    """The JSON path of the first NaN / infinity in a decoded document, None when there is none (iterative: any depth)."""
    pending = [(value, path)]
    while pending:
        item, where = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where, item
        if isinstance(item, dict):
            pending.extend((child, f"{where}.{key}") for key, child in reversed(list(item.items())))
        elif isinstance(item, list):
            pending.extend((child, f"{where}[{index}]") for index, child in reversed(list(enumerate(item))))
    return None


class JsonAt(ParseError):
    """A JSON document that does not parse; ``end`` is how far the decoder read (past it no retry helps)."""

    def __init__(self, message, end):
        super().__init__(message)
        self.end = end


# Candidates are decoded in a window that doubles while the document runs past it: a failed decode
# costs what it read, not the rest of the text (json's error message counts lines up to the error).
_JSON_WINDOW = 256
_DECODER = json.JSONDecoder()


def json_document(text, tool, start=0):
    """(value, end) of the JSON document at ``text[start:]``.

    Raises JsonAt (a ParseError, never RecursionError) when it does not parse; its ``end`` is the
    position the decoder stopped at (the end of the text for a document nested too deeply).
    A document holding NaN or Infinity (which Python's json reads, and 1e999 too) is refused
    naming the first such field: no report could hold it.
    """
    decoder = _DECODER
    window = _JSON_WINDOW
    while True:
        stop = min(len(text), start + window)
        chunk = text[start:stop]
        try:
            value, end = decoder.raw_decode(chunk)
        except RecursionError as exc:
            raise JsonAt(f"{tool}: the JSON output is nested too deeply to read", len(text)) from exc
        except ValueError as exc:
            position = getattr(exc, "pos", len(chunk))
            ran_out = position >= len(chunk) - 64 or str(exc).startswith("Unterminated string")
            if stop < len(text) and ran_out:
                window *= 2
                continue
            raise JsonAt(f"{tool}: the JSON output does not parse: {exc}", start + max(position, 1)) from exc
        if end >= len(chunk) - 64 and stop < len(text):
            # A number or literal may go on past the window ("12" of "123"): decode the whole document again.
            window *= 2
            continue
        found = _non_finite_path(value)
        if found is not None:
            raise JsonAt(f"{tool}: {found[0]} is {found[1]!r}, not a finite number: the tool printed no usable measurement", start + end)
        return value, start + end
