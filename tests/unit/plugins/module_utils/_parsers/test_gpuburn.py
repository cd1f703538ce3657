"""Tests of the gpu-burn output parser."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import gpuburn
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.tests.conftest import OWN, REAL, real_params


def _real(relative):
    path = REAL / "gpu-burn" / relative
    if not path.is_file():
        pytest.skip(f"{relative}: ../shared/fixtures/real is absent")
    return path.read_text(encoding="utf-8")


def _gpu(index, ok=None, errors=None, gflops=None, temp_c=None, died=False):
    return {"index": index, "ok": ok, "errors": errors, "gflops": gflops, "temp_c": temp_c, "died": died}


def test_pass_8gpu_superbench_reads_the_last_complete_repaint():
    parsed = gpuburn.parse(_real("gpu_burn_PASS_8xA100-SXM4-80GB_superbench.log"))
    assert parsed["result"] == "pass"
    assert parsed["duration_s"] is None  # the log has no "Burning for N seconds." line
    assert parsed["progress_pct"] == 100.0
    gflops = [16942.0, 17093.0, 16957.0, 16926.0, 16890.0, 16950.0, 17010.0, 16926.0]
    temps = [62, 59, 58, 60, 60, 59, 58, 61]
    assert parsed["gpus"] == [_gpu(index, ok=True, errors=0, gflops=gflops[index], temp_c=temps[index]) for index in range(8)]


def test_pass_1gpu_newer_version_without_progress_lines():
    parsed = gpuburn.parse(_real("gpu_burn_PASS_1gpu_newer-version_A2000_issue124.txt"))
    assert parsed["result"] == "pass"
    assert parsed["duration_s"] == 10
    assert parsed["progress_pct"] is None
    assert parsed["gpus"] == [_gpu(0, ok=True)]


def test_progress_only_newer_version_is_incomplete():
    parsed = gpuburn.parse(_real("gpu_burn_progress_1gpu_newer-version_A500_issue124.txt"))
    assert parsed["result"] == "incomplete"
    assert parsed["duration_s"] == 10
    assert parsed["progress_pct"] == 100.0
    assert parsed["gpus"] == [_gpu(0, errors=0, gflops=3519.0, temp_c=53)]


def test_partial_2gpu_is_incomplete_with_last_progress():
    parsed = gpuburn.parse(_real("gpu_burn_progress_2gpu_GTX1080_issue48_PARTIAL.txt"))
    assert parsed["result"] == "incomplete"
    assert parsed["progress_pct"] == 80.0
    assert parsed["gpus"] == [_gpu(0, errors=0, gflops=6981.0, temp_c=63), _gpu(1, errors=0, gflops=6485.0, temp_c=83)]


def test_died_workers_are_incomplete_and_their_garbage_counters_dropped():
    parsed = gpuburn.parse(_real("gpu_burn_DIED_8gpu_progress-line_issue69.txt"))
    assert parsed["result"] == "incomplete"
    assert parsed["progress_pct"] == 30.0
    temps = [30, 30, 30, 30, 29, 31, 30, 30]
    assert parsed["gpus"] == [_gpu(index, temp_c=temps[index], died=True) for index in range(8)]


def test_own_faulty_gpu_fails():
    parsed = gpuburn.parse((OWN / "gpuburn" / "gpu_burn_2gpu_gpu1-FAULTY.txt").read_text(encoding="utf-8"))
    assert parsed["result"] == "fail"
    assert parsed["duration_s"] == 60
    assert parsed["gpus"] == [
        _gpu(0, ok=True, errors=0, gflops=16812.0, temp_c=61),
        _gpu(1, ok=False, errors=1544, gflops=16790.0, temp_c=64),
    ]


def test_verdict_cut_short_is_incomplete():
    text = "Tested 4 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n"
    parsed = gpuburn.parse(text)
    assert parsed["result"] == "incomplete"
    assert [gpu["ok"] for gpu in parsed["gpus"]] == [True, True]


def test_repaint_cut_mid_line_is_ignored():
    complete = "50.0%  proc'd: 10 (100 Gflop/s) - 12 (110 Gflop/s)   errors: 0 - 0   temps: 40 C - 41 C "
    cut = "\r60.0%  proc'd: 20 (200 Gflop/s) - 22 (210 Gflop/s)   errors: 0 - 0   temps: 45 C - "
    parsed = gpuburn.parse(complete + cut)
    assert parsed["progress_pct"] == 50.0
    assert [gpu["temp_c"] for gpu in parsed["gpus"]] == [40, 41]


@pytest.mark.parametrize("text", ["", "Run length not specified in the command line.\nBurning for 10 seconds.\n", "GPU 0: NVIDIA A100 (UUID: GPU-x)\n"])
def test_text_without_progress_or_verdict_is_a_parse_error(text):
    with pytest.raises(ParseError, match="gpu-burn"):
        gpuburn.parse(text)


@pytest.mark.parametrize("path", real_params("gpu-burn/*"))
def test_every_gpu_burn_file_has_a_result(path):
    parsed = gpuburn.parse(path.read_text(encoding="utf-8"))
    assert parsed["result"] in ("pass", "fail", "incomplete")
    assert parsed["gpus"]


_REPAINT = "46.7%  proc'd: 11367 (7109 Gflop/s) - 11100 (6743 Gflop/s)   errors: 0 - 1   temps: 62 C - 82 C "


@pytest.mark.parametrize("separator", ["\r", "\n", " ", ""])
def test_repaints_without_line_breaks_are_each_read(separator):
    """Issue 8: repaints run together (no newline between them) are read one by one, the last one counts."""
    text = separator.join([_REPAINT] * 3 + [_REPAINT.replace("errors: 0 - 1", "errors: 0 - 2").replace("46.7%", "50.0%")])
    result = gpuburn.parse(text)
    assert result["progress_pct"] == 50.0
    assert [(gpu["errors"], gpu["temp_c"]) for gpu in result["gpus"]] == [(0, 62), (2, 82)]
    assert result["result"] == "incomplete"


def test_repaint_cut_before_its_last_temperature_keeps_the_previous_one():
    text = _REPAINT + "\r" + _REPAINT.replace("errors: 0 - 1", "errors: 5 - 1")[:-8]
    assert [gpu["errors"] for gpu in gpuburn.parse(text)["gpus"]] == [0, 1]


@pytest.mark.parametrize("end", range(len(_REPAINT) - len("82 C "), len(_REPAINT) - len(" ")))
def test_repaint_cut_inside_its_last_temperature_keeps_the_previous_one(end):
    # "temps: 62 C - 8" of 82 C was read as GPU 1 at no temperature, with the cut repaint's error count (5).
    text = _REPAINT + "\r" + _REPAINT.replace("errors: 0 - 1", "errors: 0 - 5")[:end]
    parsed = gpuburn.parse(text)
    assert [(gpu["errors"], gpu["temp_c"]) for gpu in parsed["gpus"]] == [(0, 62), (1, 82)]
