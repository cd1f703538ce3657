"""Tests of the DCGM version parsers (dcgmi --version, nv-hostengine --version, dcgmi -v), on every real capture under stack/dcgm."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.dcgm_version import parse_build_info, parse_dcgmi_version

from tests.conftest import real_params

# (dcgmi --version, hostengine version, local version); None: refused.
REAL = {
    "dcgmi_--version_4.7.0_nv-hostengine_--version_dpkg-l_dcgm4-split-packages-cuda13_DCGM-issue314.txt": ("4.7.0", "4.7.0", None),
    "dcgmi_-v_Local-and-Hostengine-build-info_4.7.0_DCGM-issue314.txt": (None, "4.7.0", "4.7.0"),
    "DOCS_DCGM-repo_support_EOL.md": (None, None, None),
}


@pytest.mark.parametrize("path", real_params("stack/dcgm/*"))
def test_real(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    dcgmi, hostengine, local = REAL[path.name]
    if dcgmi is None:
        with pytest.raises(ParseError, match="dcgmi --version"):
            parse_dcgmi_version(text)
    else:
        assert parse_dcgmi_version(text) == dcgmi
    if hostengine is None:
        with pytest.raises(ParseError, match="nv-hostengine --version"):
            parse_build_info(text)
        return
    result = parse_build_info(text)
    assert (result["hostengine"]["version"], (result["local"] or {}).get("version")) == (hostengine, local)
    assert result["hostengine"]["branch"] == "v4.7.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("\ndcgmi  version: 4.7", "no 'dcgmi version"),  # cut: 4.7 of 4.7.0
        ("\ndcgmi  version: 4.x.0\n", "'4.x.0' is not a DCGM version"),
        ("dcgmi  version: 4.7.0\ndcgmi  version: 3.3.9\n", "more than one version"),
    ],
)
def test_dcgmi_version_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_dcgmi_version(text)


def test_build_info_skew_between_client_and_host_engine():
    text = "Local build info:\nVersion : 4.7.0\n\nHostengine build info:\nVersion : 3.3.9\n"
    result = parse_build_info(text)
    assert (result["local"]["version"], result["hostengine"]["version"]) == ("4.7.0", "3.3.9")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Version : 4.7.0\nVersion : 4.7.1\n", "'Version' is printed twice"),
        ("Version : 4.7\nBuild ID : 1\n", "hostengine version '4.7'"),
        ("Build ID : 1\n", "no 'Version : <version>'"),
    ],
)
def test_build_info_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_build_info(text)
