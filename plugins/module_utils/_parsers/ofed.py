# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parser of ``ofed_info -s`` (private: may change without notice).

MLNX_OFED prints ``MLNX_OFED_LINUX-23.10-1.1.9.0:``; DOCA-OFED (DOCA-Host) and the stacks NVIDIA
preinstalls on DGX OS print ``OFED-internal-24.10-1.1.4.0.200:``. ``ofed_info`` without ``-s`` starts with
the same name and the upstream OFED in brackets: ``MLNX_OFED_LINUX-4.4-1.0.0.0 (OFED-4.4-1.0.0):``.
A node without ``ofed_info`` runs the distribution's inbox RDMA stack: the caller decides that (the
command is absent), this parser only reads what the tool printed.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

TOOL = "ofed_info -s"

FLAVORS = {"MLNX_OFED_LINUX": "mlnx-ofed", "OFED-internal": "doca-ofed"}
# 23.10-1.1.9.0, 24.10-1.1.4.0.200, 25.10-1.7.1, 5.4-3.1.0.0, 4.4-1.0.0.0: year.month (or major.minor), a dash, dotted numbers.
VERSION_PATTERN = r"[0-9]{1,2}\.[0-9]{1,2}-[0-9]+(?:\.[0-9]+){1,4}"
# The colon ends the line as ofed_info prints it; a copy without it (edited notes) still ends at the line's end.
_LINE = re.compile(rf"^[ \t]*(?P<name>MLNX_OFED_LINUX|OFED-internal)-(?P<version>{VERSION_PATTERN})(?:[ \t]+\(OFED-[^)\s]+\))?:?[ \t]*$", re.MULTILINE)


def parse_ofed_info(text):
    """``ofed_info -s`` (or the first line of ``ofed_info``) -> ``{"flavor", "version", "release"}``.

    ``flavor``: ``mlnx-ofed`` (``MLNX_OFED_LINUX-…``) or ``doca-ofed`` (``OFED-internal-…``); ``version``:
    ``23.10-1.1.9.0``; ``release``: the name as printed. A last line that no newline ends is not read (it
    may be cut: ``23.10-1.1.9`` of 23.10-1.1.9.0). ParseError when no such line is printed (``ofed_info -n``
    prints the bare number, which names no flavour) or when two lines name different releases.
    """
    found = {}
    for match in _LINE.finditer(whole_lines(text or "")):
        found.setdefault(f"{match.group('name')}-{match.group('version')}", match)
    if not found:
        shown = (text or "").strip()[:200]
        raise ParseError(
            f"{TOOL}: no 'MLNX_OFED_LINUX-<version>:' or 'OFED-internal-<version>:' line (the release) in {shown!r}: "
            "run 'ofed_info -s' again; a bare number is 'ofed_info -n', which does not name the flavour"
        )
    if len(found) > 1:
        raise ParseError(f"{TOOL}: the release is printed as {', '.join(sorted(found))}: more than one OFED release in one output")
    release, match = next(iter(found.items()))
    return {"flavor": FLAVORS[match.group("name")], "version": match.group("version"), "release": release}
