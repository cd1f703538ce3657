# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parser of ``/etc/init.d/openibd restart`` (private: may change without notice).

It prints one line per step with ``[  OK  ]`` or ``[FAILED]`` in a column (``Unloading HCA driver:``,
``Loading HCA driver and Access Layer:``); when an application holds the InfiniBand devices it refuses before
unloading anything: ``Please stop "opensm" and all applications running over InfiniBand.``, one
``opensm(1632) user root is using device umad0`` line per holder, and ``Error: Cannot unload the Infiniband driver
stack due to the above issue(s)!``. A module in use by another stack (nvme-rdma) fails its step:
``Unloading mlx_compat [FAILED]`` and ``rmmod: ERROR: Module mlx_compat is in use by: nvme_core nvme_fabrics``.
The module judges the restart by its exit status; these lines name what held the stack.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

TOOL = "openibd restart"

_STEP = re.compile(r"^\s*(?P<step>\S[^\[\n]*?)[: \t]*\[\s*(?P<status>OK|FAILED)\s*\]\s*$", re.MULTILINE)
_HOLDER = re.compile(r"^\s*(?P<process>[\w.-]+)\((?P<pid>\d+)\) user \S+ is using device (?P<device>\S+)\s*$", re.MULTILINE)
_PLEASE_STOP = re.compile(r'^\s*Please stop "(?P<process>[^"]+)"', re.MULTILINE)
_IN_USE = re.compile(r"^\s*rmmod: ERROR: Module (?P<module>\w+) is in use by: (?P<users>[\w ]+?)\s*$", re.MULTILINE)
_CANNOT = re.compile(r"^\s*Error: (?P<error>Cannot unload the Infiniband driver stack[^\n]*)$", re.MULTILINE)


def parse_restart(text):
    """``openibd restart`` output -> ``{"ok", "steps": [{"step", "status"}], "holders": [{"process", "pid", "device"}],
    "in_use": [{"module", "users"}], "error"}``.

    ``ok``: every step printed ``OK`` and nothing refused. ParseError when no step, holder or refusal is printed
    (not openibd's output). A last line that no newline ends is not read (it may be cut).
    """
    text = re.sub(r"\\([\[\]#-])", r"\1", whole_lines(str(text or "")))
    steps = [{"step": match.group("step").strip(), "status": match.group("status")} for match in _STEP.finditer(text)]
    holders = [{"process": m.group("process"), "pid": int(m.group("pid")), "device": m.group("device")} for m in _HOLDER.finditer(text)]
    stop = [m.group("process") for m in _PLEASE_STOP.finditer(text)]
    in_use = [{"module": m.group("module"), "users": m.group("users").split()} for m in _IN_USE.finditer(text)]
    cannot = _CANNOT.search(text)
    if not (steps or holders or stop or in_use or cannot):
        raise ParseError(f"{TOOL}: no step with [  OK  ] / [FAILED], no holder and no refusal in {text.strip()[:200]!r}")
    for process in stop:
        if not any(holder["process"] == process for holder in holders):
            holders.append({"process": process, "pid": None, "device": None})
    ok = bool(steps) and all(step["status"] == "OK" for step in steps) and not (holders or in_use or cannot)
    return {"ok": ok, "steps": steps, "holders": holders, "in_use": in_use, "error": cannot.group("error") if cannot else None}
