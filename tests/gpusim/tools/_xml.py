"""XML escaping for the simulated tools' output: xml.sax.saxutils' escape and quoteattr, without its import.

xml.sax.saxutils imports urllib.request (and with it http.client, email, ssl): about 65 ms of every nvidia-smi and
mlxfwmanager call, which the rollout tests pay hundreds of times. These two give the same text
(tests/unit/gpusim/test_xml_escape.py compares them with saxutils').
"""

from __future__ import annotations


def escape(data: str) -> str:
    """&, < and > as entities (saxutils.escape without extra entities)."""
    return data.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def quoteattr(data: str) -> str:
    """An attribute value with its quotes (saxutils.quoteattr): double quotes unless the value holds one."""
    data = escape(data).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
    if '"' in data:
        if "'" in data:
            return '"' + data.replace('"', "&quot;") + '"'
        return "'" + data + "'"
    return '"' + data + '"'
