# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse gpu-burn (wilicc/gpu-burn) output (private).

gpu-burn repaints one progress line (``\\r``, sometimes with no newline between repaints)::

    46.7%  proc'd: 11367 (7109 Gflop/s) - 11100 (6743 Gflop/s)   errors: 0 - 0   temps: 62 C - 82 C

errors are cumulative per GPU; a dead worker shows ``-1 (0 Gflop/s)`` and ``(DIED!)`` after its
error count, a GPU with errors ``(WARNING!)``. Newer versions print the same line for one GPU and a
tab-indented ``Summary at:`` line after it. The verdict comes at the end::

    Tested 8 GPUs:
    \tGPU 0: OK
    \tGPU 1: FAULTY
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, finite_float

# Where a progress repaint starts; its fields are then found with str.find (linear): a regex with
# several lazy parts restarted at every "%" was quadratic (20,000 repaints: 103 s).
_PROGRESS_START = re.compile(r"(?P<pct>\d{1,3}(?:\.\d{1,3})?)%[ \t]+proc'd:")
# Counts have at most 18 digits (more is no count, and int() refuses 4,300); a rate printed as nan / inf
# (printf of a division by a zero time) is matched so that it is refused, not read as a malformed repaint.
_PROCD_ITEM = re.compile(r"^(?P<n>-?\d{1,18})\s*\(\s*(?P<gflops>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-?(?:nan|inf(?:inity)?))\s*Gflop/s\s*\)$", re.IGNORECASE)
_ERROR_ITEM = re.compile(r"^(?P<n>-?\d{1,18})\s*(?:\((?P<note>DIED|WARNING)!\))?$")
_TEMP_ITEM = re.compile(r"^(?P<t>-?\d{1,18})\s*C$")
_TESTED = re.compile(r"^[ \t]*Tested[ \t]+(?P<n>\d+)[ \t]+GPUs?:[ \t]*$", re.MULTILINE)
_VERDICT = re.compile(r"^\s*GPU\s+(?P<index>\d+):\s*(?P<verdict>OK|FAULTY)\s*$")
_DURATION = re.compile(r"Burning for[ \t]+(?P<s>\d+)[ \t]+seconds")
# gpu-burn separates per-GPU items with " - " (after "(DIED!)" with no space before the dash).
_ITEM_SEPARATOR = re.compile(r"(?:[ \t]{1,16}|(?<=\)))-[ \t]+")


def _split(part):
    """Per-GPU items of one field."""
    return [item.strip() for item in _ITEM_SEPARATOR.split(part.strip()) if item.strip()]


def _records(text):
    """(percent, the text after "proc'd:") of every progress repaint, in order; a repaint ends at the next one or the line end."""
    for segment in re.split(r"[\r\n]", text):
        starts = list(_PROGRESS_START.finditer(segment))
        for number, start in enumerate(starts):
            end = starts[number + 1].start() if number + 1 < len(starts) else len(segment)
            yield start.group("pct"), segment[start.end() : end]


def _progress(pct, body):
    """Per-GPU values of one complete progress repaint, or None when it is cut short or malformed."""
    errors_at = body.find("errors:")
    temps_at = body.find("temps:", errors_at + 1) if errors_at >= 0 else -1
    if temps_at < 0:
        return None
    procd = [_PROCD_ITEM.match(item) for item in _split(body[:errors_at])]
    errors = [_ERROR_ITEM.match(item) for item in _split(body[errors_at + len("errors:") : temps_at])]
    if not procd or not all(procd) or not all(errors) or len(errors) != len(procd):
        return None
    temps = [_TEMP_ITEM.match(item) for item in _split(body[temps_at + len("temps:") :])]
    if len(temps) != len(procd) or not all(temps):
        # A repaint cut before or inside its last temperature ("8" of 82 C, "82" without its C) is not a complete line;
        # gpu-burn prints every temperature as "<n> C", so a whole repaint needs no newline after it.
        return None
    gpus = []
    for index, (done, error, temp) in enumerate(zip(procd, errors, temps)):
        died = int(done.group("n")) == -1 or error.group("note") == "DIED"
        gpus.append(
            {
                "index": index,
                # A dead worker's counters are garbage (gpu-burn prints uninitialised memory).
                "errors": None if died else int(error.group("n")),
                "gflops": None if died else finite_float(done.group("gflops"), "gpu-burn", f"the Gflop/s of GPU {index}"),
                "temp_c": int(temp.group("t")),
                "died": died,
            }
        )
    return {"pct": float(pct), "gpus": gpus}


def parse(text):
    """Parse gpu-burn output.

    Returns ``{"result": "pass" | "fail" | "incomplete", "gpus": [{"index", "ok", "errors", "gflops",
    "temp_c", "died"}], "duration_s", "progress_pct"}``. ``ok`` comes from the final ``GPU N: OK`` /
    ``FAULTY`` lines (None when the run did not reach them); ``errors``, ``gflops`` and ``temp_c``
    from the last complete progress line (None when there is none, or for a worker that died).
    ``result`` is ``fail`` when a GPU is FAULTY, ``pass`` when every tested GPU is OK, and
    ``incomplete`` when the verdict is missing or cut short (a dead worker, a truncated log).
    """
    if text is None or not text.strip():
        raise ParseError("gpu-burn: empty output")

    last = None
    for pct, body in _records(text):
        progress = _progress(pct, body)
        if progress is not None:
            last = progress

    verdicts = {}
    tested = None
    blocks = list(_TESTED.finditer(text))
    tested_match = blocks[-1] if blocks else None  # the last "Tested N GPUs:" block is the verdict
    if tested_match:
        tested = int(tested_match.group("n"))
        for line in text[tested_match.end() :].splitlines():
            match = _VERDICT.match(line)
            if match:
                verdicts[int(match.group("index"))] = match.group("verdict") == "OK"
            elif line.strip():
                break

    if last is None and not verdicts:
        raise ParseError("gpu-burn: no progress line (\"proc'd: ... errors: ... temps: ...\") and no 'Tested N GPUs:' verdict")

    gpus = {gpu["index"]: dict(gpu, ok=None) for gpu in (last["gpus"] if last else [])}
    for index, ok in verdicts.items():
        gpu = gpus.setdefault(index, {"index": index, "errors": None, "gflops": None, "temp_c": None, "died": False})
        gpu["ok"] = ok

    if verdicts and not all(verdicts.values()):
        result = "fail"
    elif verdicts and len(verdicts) == tested and all(verdicts.values()):
        result = "pass"
    else:
        result = "incomplete"

    duration = _DURATION.search(text)
    return {
        "result": result,
        "gpus": [gpus[index] for index in sorted(gpus)],
        "duration_s": int(duration.group("s")) if duration else None,
        "progress_pct": last["pct"] if last else None,
    }
