"""Tests of the ofed_info -s parser, on every real capture under stack/ofed and stack/ib."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.ofed import parse_ofed_info

from tests.conftest import real_params

# The files that hold an ofed_info release line, read by hand: (flavor, version). Every other file of the two
# folders (install logs, openibd, package lists, ibstat, the bare number of ofed_info -n) must be refused.
REAL = {
    "doca-ofed_3.2.1_install_mlnx-fw-updater_AUTO-FW-UPDATE_CX7-DGX-Spark_28.45.4028-to-28.47.1088_ofed_info-s_OFED-internal-25.10_aerial-docs.txt": (
        "doca-ofed",
        "25.10-1.7.1",
    ),
    "lshca_CX7-MCX75510AAS-NEAT_28.42.1000_ib-down-rate10_and_ofed_info-s_OFED-internal-24.07-0.3.5.0.110_lshca102.txt": ("doca-ofed", "24.07-0.3.5.0.110"),
    "ofed_info-s_MLNX_OFED_LINUX-23.07-0.5.1.2_DaoCloud-docs_deindented.txt": ("mlnx-ofed", "23.07-0.5.1.2"),
    # Edited notes without the colon ofed_info prints: the line still ends at its newline, so the version is whole.
    "ofed_info-s_MLNX_OFED_LINUX-24.10-1.1.4.0_NO-COLON_and_dpkg-grep-mlnx-ofed_CN-notes_edited.txt": ("mlnx-ofed", "24.10-1.1.4.0"),
    "ofed_info-s_MLNX_OFED_LINUX-24.10-3.2.5.0_RTX6000D-CX7-host.txt": ("mlnx-ofed", "24.10-3.2.5.0"),
    "ofed_info-s_MLNX_OFED_LINUX-5.4-3.1.0.0_ofed_info-n_rpm-qf-ofed-scripts_CN-notes.txt": ("mlnx-ofed", "5.4-3.1.0.0"),
    "ofed_info-s_OFED-internal-24.04-0.6.6_preinstalled-DGX-Spark_aerial-docs.txt": ("doca-ofed", "24.04-0.6.6"),
    "ofed_info-s_OFED-internal-24.10-1.1.4.0.200_doca-ofed-on-DGX-OS.txt": ("doca-ofed", "24.10-1.1.4.0.200"),
    "ofed_info_FULL_MLNX_OFED_LINUX-23.10-1.1.9.0_with-Installed-Packages-dpkg_Ubuntu22.04_DaoCloud-docs_deindented.txt": ("mlnx-ofed", "23.10-1.1.9.0"),
    "ofed_info_head_MLNX_OFED_LINUX-4.4-1.0.0.0_nv_peer_memory43.txt": ("mlnx-ofed", "4.4-1.0.0.0"),
    "ofed_info-s_23.10-1.1.9.0_and_ibv_devinfo_Azure-ND-H200-v5_8xCX7-VF-4126_28.40.1702_IB_plus_CX5-VF-Ethernet.txt": ("mlnx-ofed", "23.10-1.1.9.0"),
    "ofed_info-s_OFED-internal-23.07-0.5.0_BF3-host_sglang-docs_deindented.txt": ("doca-ofed", "23.07-0.5.0"),
}


@pytest.mark.parametrize("path", real_params("stack/ofed/*") + real_params("stack/ib/*"))
def test_real(path):
    expected = REAL.get(path.name)
    text = path.read_text(encoding="utf-8", errors="replace")
    if expected is None:
        with pytest.raises(ParseError, match="ofed_info -s"):
            parse_ofed_info(text)
        return
    result = parse_ofed_info(text)
    assert (result["flavor"], result["version"]) == expected
    assert result["release"].endswith(expected[1])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MLNX_OFED_LINUX-23.10-1.1.9.0:\n", ("mlnx-ofed", "23.10-1.1.9.0")),
        ("OFED-internal-25.10-1.7.1:\n", ("doca-ofed", "25.10-1.7.1")),
        ("MLNX_OFED_LINUX-4.4-1.0.0.0 (OFED-4.4-1.0.0):\nother\n", ("mlnx-ofed", "4.4-1.0.0.0")),
    ],
)
def test_forms(text, expected):
    result = parse_ofed_info(text)
    assert (result["flavor"], result["version"]) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Cut short: the last line has no newline, 23.10-1.1.9 may be 23.10-1.1.9.0.
        ("MLNX_OFED_LINUX-23.10-1.1.9", "no 'MLNX_OFED_LINUX"),
        ("5.0-2.1.8\n", "ofed_info -n"),
        ("MLNX_OFED_LINUX-23.10-1.1.9.0:\nOFED-internal-24.10-1.1.4.0.200:\n", "more than one OFED release"),
        ("MLNX_OFED_LINUX-23.10:\n", "no 'MLNX_OFED_LINUX"),
        ("MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu22.04-x86_64:\n", "no 'MLNX_OFED_LINUX"),
        ("", "no 'MLNX_OFED_LINUX"),
    ],
)
def test_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_ofed_info(text)
