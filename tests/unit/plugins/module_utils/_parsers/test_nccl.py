"""Tests of the nccl-tests output parser."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nccl
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.tests.conftest import OWN, REAL, real_params


def _real(relative):
    path = REAL / relative
    if not path.is_file():
        pytest.skip(f"{relative}: ../shared/fixtures/real is absent")
    return path.read_text(encoding="utf-8")


def _own(name):
    return (OWN / "nccl" / name).read_text(encoding="utf-8")


def _own_validate(name):
    return (OWN / "validate" / name).read_text(encoding="utf-8")


def test_old_format_superbench():
    parsed = nccl.parse_tests(_real("nccl-tests/all_reduce_perf_1proc_8xA100-SXM4-40GB_OLD-format_superbench.log"))
    assert parsed["avg_busbw_gbps"] == 68.4048
    assert parsed["out_of_bounds"] == 0
    # validation: 0 and the old "error" column: no count of wrong elements exists.
    assert parsed["wrong"] is None
    assert parsed["nccl_version"] is None
    assert parsed["error"] is None
    assert len(parsed["devices"]) == 8
    assert parsed["devices"][7] == {"rank": 7, "host": "localhost", "device": 7, "bus_id": "0x00", "name": "A100-SXM4-40GB"}
    rows = parsed["rows"]
    assert len(rows) == 34  # two 0-byte rows as in the file, then 4 B .. 8 GiB
    assert [row["size_bytes"] for row in rows[:3]] == [0, 0, 4]
    last = rows[-1]
    assert last["size_bytes"] == 8589934592
    assert last["count"] == 2147483648
    assert (last["type"], last["redop"], last["root"]) == ("float", "sum", None)
    assert last["oop"] == {"time_us": 63896.0, "algbw_gbps": 134.44, "busbw_gbps": 235.26, "wrong": None, "error": None}
    assert last["ip"] == {"time_us": 63959.0, "algbw_gbps": 134.30, "busbw_gbps": 235.03, "wrong": None, "error": None}
    row_128 = next(row for row in rows if row["size_bytes"] == 128)
    assert row_128["ip"]["time_us"] == 43.78


def test_markdown_mangled_two_node_run_reads_fully_and_correctly():
    parsed = nccl.parse_tests(_real("nccl-tests/all_reduce_perf_2node_16xH100_a3mega_8B-8G_MARKDOWN-MANGLED.txt"))
    assert parsed["avg_busbw_gbps"] == 70.742
    assert parsed["out_of_bounds"] == 0
    assert parsed["wrong"] == 0
    devices = parsed["devices"]
    assert [device["rank"] for device in devices] == list(range(16))
    # Rank 0 lost its '#' in the paste and is still read.
    assert devices[0] == {"rank": 0, "host": "ztan-mig-235z", "device": 0, "bus_id": "0000:04:00", "name": "NVIDIA H100 80GB HBM3"}
    assert devices[15] == {"rank": 15, "host": "ztan-mig-gq73", "device": 7, "bus_id": "0000:8c:00", "name": "NVIDIA H100 80GB HBM3"}
    rows = parsed["rows"]
    assert len(rows) == 31
    assert rows[0]["size_bytes"] == 8
    assert rows[0]["root"] == -1
    assert rows[0]["oop"] == {"time_us": 135.8, "algbw_gbps": 0.0, "busbw_gbps": 0.0, "wrong": 0, "error": None}
    assert rows[-1]["size_bytes"] == 8589934592
    assert rows[-1]["oop"]["busbw_gbps"] == 338.82
    assert rows[-1]["ip"] == {"time_us": 47743.0, "algbw_gbps": 179.92, "busbw_gbps": 337.35, "wrong": 0, "error": None}


def test_current_format_log_with_several_runs():
    text = _real("empovit_nvidia-tools/nccl-tests/samples/all_reduce_perf.log")
    with pytest.raises(ParseError, match="6 runs"):
        nccl.parse_tests(text)
    runs = nccl.parse_runs(text)
    assert [run["avg_busbw_gbps"] for run in runs] == [5.68719, 5.63861, 21.9093, 5.61644, 42.3627, 5.57758]
    first = runs[0]
    assert first["devices"] == [
        {"rank": 0, "host": "nccl-tests", "device": 0, "bus_id": "0x06", "name": "Tesla V100-SXM2-32GB"},
        {"rank": 1, "host": "nccl-tests", "device": 1, "bus_id": "0x89", "name": "Tesla V100-SXM2-32GB"},
    ]
    (row,) = first["rows"]
    assert row["size_bytes"] == 33554432
    assert row["count"] == 8388608
    assert row["root"] == -1
    # -c 0: #wrong is N/A on both halves.
    assert row["oop"] == {"time_us": 5963.4, "algbw_gbps": 5.63, "busbw_gbps": 5.63, "wrong": None, "error": None}
    assert row["ip"]["wrong"] is None
    assert first["wrong"] is None
    assert runs[4]["devices"][1]["bus_id"] == "0x0b"
    assert all(run["error"] is None for run in runs)


def test_sendrecv_log_keeps_failed_runs_apart():
    runs = nccl.parse_runs(_real("empovit_nvidia-tools/nccl-tests/samples/sendrecv_perf.log"))
    assert len(runs) == 6
    failed = [run for run in runs if run["error"]]
    assert len(failed) == 4
    for run in failed:
        assert run["rows"] == []
        assert run["avg_busbw_gbps"] is None
        assert run["error"].startswith("Test NCCL failure common.cu:394 'unhandled system error")
    assert [run["avg_busbw_gbps"] for run in runs if not run["error"]] == [22.6314, 38.9777]
    assert runs[4]["rows"][0]["ip"]["busbw_gbps"] == 40.86


@pytest.mark.parametrize("path", real_params("empovit_nvidia-tools/nccl-tests/samples/*-help.log"))
def test_help_text_is_a_parse_error(path):
    with pytest.raises(ParseError, match="help text"):
        nccl.parse_tests(path.read_text(encoding="utf-8"))


def test_own_wrong_values_and_nccl_version():
    parsed = nccl.parse_tests(_own("all_gather_perf_2gpu_wrong-values_current-format.txt"))
    assert parsed["nccl_version"] == "2.21.5"
    assert parsed["wrong"] == 5  # 3 out-of-place at 2 KiB + 2 in-place at 4 KiB; N/A counts as unknown
    assert parsed["out_of_bounds"] == 1
    assert parsed["avg_busbw_gbps"] == 0.0967
    assert [row["redop"] for row in parsed["rows"]] == ["none"] * 3
    assert parsed["rows"][1]["ip"]["wrong"] is None
    assert parsed["rows"][1]["oop"]["wrong"] == 3


def test_own_row_cut_short_is_a_parse_error_not_a_partial_number():
    with pytest.raises(ParseError, match="columns"):
        nccl.parse_tests(_own("all_reduce_perf_cut-mid-row.txt"))


def test_nccl_version_from_nccl_tests_banner():
    text = _own("all_gather_perf_2gpu_wrong-values_current-format.txt").replace(
        "gpu-node-07:40211:40211 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "# nccl-tests version 2.13.11 nccl-headers=21903 nccl-library=21903",
    )
    assert nccl.parse_tests(text)["nccl_version"] == "2.19.3"


def test_without_avg_line_nothing_is_computed():
    text = _own("all_gather_perf_2gpu_wrong-values_current-format.txt").replace("# Avg bus bandwidth    : 0.0967\n", "")
    parsed = nccl.parse_tests(text)
    assert parsed["avg_busbw_gbps"] is None
    assert len(parsed["rows"]) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("# nThread 1 nGpus 2 minBytes 8 maxBytes 8\n#\n", "no result rows"),
        ("        8    2    float    sum   -1    1.0    0.00    0.00    zero    1.0    0.00    0.00    0\n", "not a count"),
        ("        8    2    float    sum   -1    fast    0.00    0.00    0    1.0    0.00    0.00    0\n", "not a number"),
    ],
)
def test_unreadable_text_is_a_parse_error(text, message):
    with pytest.raises(ParseError, match=message):
        nccl.parse_tests(text)


@pytest.mark.parametrize("path", real_params("nccl-tests/*") + real_params("empovit_nvidia-tools/nccl-tests/samples/*.log"))
def test_every_nccl_file_parses_or_raises_parse_error(path):
    try:
        runs = nccl.parse_runs(path.read_text(encoding="utf-8"))
    except ParseError:
        return
    assert runs


def test_avg_bus_bandwidth_cut_short_is_not_read():
    # "# Avg bus bandwidth    : 353.6" of 353.642 (or "3" of it) passed as the run's bandwidth.
    text = _own_validate("all_reduce_perf_2gpu_1G-8G.txt")
    start = text.index("# Avg bus bandwidth")
    for end in range(start + 1, text.index("\n", start)):
        parsed = nccl.parse_tests(text[:end])
        assert parsed["avg_busbw_gbps"] is None, text[start:end]
        assert len(parsed["rows"]) == 4
    assert nccl.parse_tests(text[: text.index("\n", start) + 1])["avg_busbw_gbps"] == 353.642


def test_last_row_cut_in_its_wrong_count_is_not_read():
    # "#wrong 1" of 12 in the last row of a log cut there: one wrong element where there were twelve.
    text = _own_validate("all_reduce_perf_2gpu_1G-8G.txt")
    row_end = text.index("\n", text.index("  8589934592"))
    text = text[: row_end - 1] + "12" + text[row_end:]
    assert nccl.parse_tests(text)["wrong"] == 12
    parsed = nccl.parse_tests(text[: row_end])  # "... 354.78      1"
    assert (parsed["wrong"], len(parsed["rows"])) == (0, 3)
