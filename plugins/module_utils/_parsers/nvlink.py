# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse ``nvidia-smi nvlink -s`` (NVLink status per GPU and link) (private).

One block per GPU::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c0b6e0e-...)
         Link 0: 26.562 GB/s
         Link 1: <inactive>

A link prints its speed when up and ``<inactive>`` (or another word) when down. A GPU in MIG mode
prints ``Nvlink queries are not supported for Devices in MIG mode``; a GPU without NVLink prints
``Device does not have or support Nvlink`` or nothing. A node without NVLink may print nothing at all.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, cut_line, cut_short, finite_float

TOOL = "nvidia-smi nvlink -s"
_GPU = re.compile(r"GPU\s+(?P<index>\d+):\s*(?P<name>.*?)\s*(?:\(UUID:\s*(?P<uuid>[^)]+)\))?")
_LINK = re.compile(r"Link\s+(?P<link>\d+):\s*(?P<value>.*?)")
_GPU_START = re.compile(r"(?m)^\s*GPU\s+(\d+):")
# nan / inf are matched so that they are refused naming the link, not read as a link that is down.
_SPEED = re.compile(r"(?P<speed>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-?(?:nan|inf(?:inity)?))\s*GB/s", re.IGNORECASE)


def _cut_field(text, cut):
    """What a cut last line held: ``link 1 of GPU 1``, ``GPU 2``, or the lines of the last GPU."""
    gpus = _GPU_START.findall(text)
    link = re.match(r"\s*Link\s+(\d+)", cut)
    if _GPU_START.match(cut):
        return f"GPU {gpus[-1]}"
    if link and gpus:
        return f"link {link.group(1)} of GPU {gpus[-1]}"
    return f"the lines of GPU {gpus[-1]}" if gpus else "its first line"


def parse_status(text):
    """``nvidia-smi nvlink -s`` -> ``[{"index", "name", "uuid", "links": [{"link", "up", "gbps", "raw"}], "unsupported", "notes"}]``.

    ``up`` is true only for a link that prints its speed: any other value (``<inactive>``) is down and
    kept in ``raw``. ``unsupported`` is the GPU's "not supported" line (MIG mode), else None; ``notes``
    are the GPU's other lines (``Device does not have or support Nvlink``). Empty or blank output is
    ``[]`` (no NVLink on the node). Raises ParseError for output with text but no ``GPU n:`` line
    (an NVML error printed with exit status 0), a ``Link`` line before any GPU, a GPU or link
    that appears twice, or a last line without its newline: the output was cut short there (a speed
    ``26.5`` of 26.562 GB/s would read as a link down, the links after it would be missing).
    """
    cut = cut_line(text)
    if cut and cut.strip():
        raise cut_short(TOOL, _cut_field(text, cut), cut)
    gpus = []
    seen_gpus = set()
    seen_links = set()
    preamble = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _GPU.fullmatch(line)
        if match:
            index = int(match.group("index"))
            if index in seen_gpus:
                raise ParseError(f"{TOOL}: GPU {index} is listed twice")
            seen_gpus.add(index)
            seen_links = set()
            gpus.append({"index": index, "name": match.group("name"), "uuid": match.group("uuid"), "links": [], "unsupported": None, "notes": []})
            continue
        match = _LINK.fullmatch(line)
        if match:
            if not gpus:
                raise ParseError(f"{TOOL}: link line {line[:120]!r} before any 'GPU n:' line")
            number = int(match.group("link"))
            if number in seen_links:
                raise ParseError(f"{TOOL}: GPU {gpus[-1]['index']} lists link {number} twice")
            seen_links.add(number)
            value = match.group("value")
            speed = _SPEED.fullmatch(value)
            gbps = finite_float(speed.group("speed"), TOOL, f"the speed of link {number} of GPU {gpus[-1]['index']}") if speed else None
            gpus[-1]["links"].append({"link": number, "up": bool(speed), "gbps": gbps, "raw": value})
            continue
        if not gpus:
            preamble.append(line)  # an echoed command line of a capture, or an error: judged once the whole text is read
            continue
        if "not supported" in line.lower():
            gpus[-1]["unsupported"] = line
        else:
            gpus[-1]["notes"].append(line)
    if preamble and not gpus:
        raise ParseError(f"{TOOL}: no 'GPU n:' line in the output, which starts {preamble[0][:200]!r}")
    return gpus


__all__ = ["TOOL", "parse_status"]
