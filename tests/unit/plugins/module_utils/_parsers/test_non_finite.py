"""Issue 21: a measurement printed as nan / inf (or too large for a float) is bad tool output, never a NaN in a result.

json.dumps writes float('nan') as NaN, which is no JSON: a report or state file holding one cannot be read back.
Every parser that turns tool output into a float refuses such a value naming the field, or reads it as no value.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dcgm, gpuburn, nccl, nvlink, nvsmi
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, finite_float, json_document, number_or_none

FIXTURES = pathlib.Path(__file__).resolve().parents[4] / "fixtures"
NON_FINITE = ("nan", "inf", "-inf", "1e999", "NaN", "Infinity")
HUGE = "1" + "0" * 400 + ".5"  # digits only, as every pattern accepts: float() makes it inf

NCCL = (FIXTURES / "validate" / "all_reduce_perf_2gpu_1G-8G.txt").read_text()
NCCL_ROW = "  1073741824     268435456     float     sum      -1   3051.2  351.91  351.91      0   3049.8  352.07  352.07      0"
BURN = (FIXTURES / "gpuburn" / "gpu_burn_2gpu_gpu1-FAULTY.txt").read_text()
NVLINK = (FIXTURES / "validate" / "nvsmi_nvlink_s_2gpu_gpu1-link1-inactive.txt").read_text()
DCGM = (FIXTURES / "dcgm" / "diag_r1_j_all-pass_dcgm3-shape.json").read_text()
NVSMI = (FIXTURES / "gpu_facts" / "nvsmi_qx_2xH100_550.90.07.xml").read_text()


def _nccl_busbw(token):
    assert NCCL_ROW in NCCL
    return NCCL.replace(NCCL_ROW, NCCL_ROW.replace("351.91  351.91", f"351.91  {token}", 1))


# (name, parser, input with the value in place, what the message must name)
CASES = [
    ("nccl busbw", nccl.parse_tests, _nccl_busbw, r"busbw"),
    ("nccl avg", nccl.parse_tests, lambda token: NCCL.replace("# Avg bus bandwidth    : 353.642", f"# Avg bus bandwidth    : {token}"), r"Avg bus bandwidth"),
    ("gpu-burn gflops", gpuburn.parse, lambda token: BURN.replace("(16812 Gflop/s)", f"({token} Gflop/s)"), r"Gflop/s of GPU 0"),
    ("nvlink speed", nvlink.parse_status, lambda token: NVLINK.replace("Link 1: 26.562 GB/s", f"Link 1: {token} GB/s", 1), r"speed of link 1 of GPU 0"),
    ("dcgm json", dcgm.parse_diag, lambda token: DCGM.replace('"version" : "3.3.9"', f'"version" : "3.3.9", "duration" : {token}'), r"duration"),
]


@pytest.mark.parametrize("token", NON_FINITE)
@pytest.mark.parametrize(("name", "parse", "make", "field"), CASES, ids=[case[0] for case in CASES])
def test_a_non_finite_measurement_is_refused_naming_the_field(name, parse, make, field, token):
    assert parse(make("1.5")) is not None  # the template reads with a finite value
    text = make(token)
    if name == "dcgm json" and token in ("nan", "inf", "-inf"):
        text = make({"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[token])  # JSON's own spelling
    with pytest.raises(ParseError, match=field):
        parse(text)


@pytest.mark.parametrize(("name", "parse", "make", "field"), CASES, ids=[case[0] for case in CASES])
def test_a_figure_too_large_for_a_float_is_refused_naming_the_field(name, parse, make, field):
    with pytest.raises(ParseError, match=rf"{field}.*not a finite number"):
        parse(make(HUGE))


@pytest.mark.parametrize("token", NON_FINITE)
def test_nvidia_smi_reads_nan_as_no_value_and_refuses_an_infinite_figure(token):
    # nvidia-smi's numbers are digits with a unit: "nan C" is no number (None), which JSON holds.
    text = NVSMI.replace("<gpu_temp>34 C</gpu_temp>", f"<gpu_temp>{token} C</gpu_temp>", 1)
    json.dumps(nvsmi.parse_xml(text), allow_nan=False)
    with pytest.raises(ParseError, match=r"nvidia-smi: gpu_temp is inf, not a finite number"):
        nvsmi.parse_xml(NVSMI.replace("<gpu_temp>34 C</gpu_temp>", f"<gpu_temp>{HUGE} C</gpu_temp>", 1))


@pytest.mark.parametrize(
    ("text", "finite"),
    [("80 C", 80), ("0.5 W", 0.5), ("N/A", None), ("nan", None), ("inf W", None), ("1e999", None)],
)
def test_number_or_none_table(text, finite):
    assert number_or_none(text) == finite


@pytest.mark.parametrize("text", [HUGE + " W", "9" * 5000])
def test_number_or_none_refuses_figures_no_tool_prints(text):
    with pytest.raises(ParseError, match=r"nvidia-smi: power\.draw"):
        number_or_none(text, "nvidia-smi", "power.draw")


@pytest.mark.parametrize("token", NON_FINITE)
def test_finite_float_table(token):
    with pytest.raises(ParseError, match="tool: the field"):
        finite_float(token, "tool", "the field")
    assert finite_float("1e3", "tool", "the field") == 1000.0


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_json_documents_name_the_first_non_finite_field(token):
    with pytest.raises(ParseError, match=r"the document\.a\[1\]\.b is .*not a finite number"):
        json_document('{"a": [1, {"b": %s}]}' % token, "tool")  # noqa: UP031 - JSON braces


@pytest.mark.parametrize("count", [5000])
def test_counts_of_thousands_of_digits_are_no_value_error(count):
    digits = "9" * count
    # nccl-tests: no count (a comment line that is not read, a row that is no result row), never a ValueError
    json.dumps(nccl.parse_tests(NCCL.replace("# Avg bus bandwidth", f"# Out of bounds values : {digits} OK\n# Avg bus bandwidth")), allow_nan=False)
    json.dumps(nccl.parse_tests(NCCL.replace(NCCL_ROW, NCCL_ROW.replace("1073741824", digits))), allow_nan=False)
    # gpu-burn: a count that long is no count (the repaint is malformed and skipped, the verdict stands)
    result = gpuburn.parse(BURN.replace("errors: 0 - 1544", f"errors: 0 - {digits}"))
    json.dumps(result, allow_nan=False)
