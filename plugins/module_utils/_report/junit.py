# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The JUnit XML document of a report (validation_report, rollout_report): well-formed whatever a message holds."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

# Characters XML 1.0 forbids even as references (ElementTree writes them as they are, and the file does not parse).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_text(text):
    """``text`` with each character that XML 1.0 forbids (the control characters but tab, newline and CR) written as its
    Python escape: ``dcgmi: \\x1b[31mFAIL`` stays readable, and the file parses."""
    return _NOT_XML.sub(lambda match: ascii(match.group())[1:-1], text)


def junit_document(suites):
    """The file's text for the ``<testsuites>`` element: a tool's message can hold control characters (dcgmi's colours,
    a NUL), written as escapes so that CI reads the file (the markup itself has none)."""
    return '<?xml version="1.0" encoding="utf-8"?>\n' + xml_text(ET.tostring(suites, encoding="unicode")) + "\n"
