"""Tests of the dcgmi parsers: diag (text 2.x/3.x/4.x and -j JSON), nvlink -s / -e, discovery -l."""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dcgm
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.tests.conftest import OWN, REAL, real_params

DEPLOYMENT_3X = [
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
]


def _read(path):
    return path.read_text(encoding="utf-8")


def _tests(parsed):
    return {test["name"]: test for test in parsed["tests"]}


def _real(relative):
    path = REAL / relative
    if not path.is_file():
        pytest.skip(f"{relative}: ../shared/fixtures/real is absent")
    return _read(path)


# Expected values read by hand from each real file: (file, result, dcgm_version, driver, level, test names in order).
REAL_DIAG = {
    "dcgmi/dcgmi_diag_r1_PASS_1xV100-PCIE-16GB_dcgm3.3.9_drv560.35.03.txt": ("pass", "3.3.9", "560.35.03", None, DEPLOYMENT_3X),
    "dcgmi/dcgmi_diag_r2_verbose_PASS_1xV100-PCIE-16GB_dcgm3.3.9_drv560.35.03.txt": (
        "pass",
        "3.3.9",
        "560.35.03",
        None,
        [*DEPLOYMENT_3X, "PCIe", "GPU Memory"],
    ),
    "dcgmi/dcgmi_diag_r3_PASS_1xV100-PCIE-16GB_dcgm3.3.9_drv560.35.03.txt": (
        "pass",
        "3.3.9",
        "560.35.03",
        None,
        [*DEPLOYMENT_3X, "PCIe", "GPU Memory", "Diagnostic", "Targeted Stress", "Targeted Power", "Memory Bandwidth", "EUD Test"],
    ),
    "dcgmi/dcgmi_diag_r3_verbose_PASS_1xV100-PCIE-16GB_dcgm3.3.9_drv560.35.03.txt": (
        "pass",
        "3.3.9",
        "560.35.03",
        None,
        [*DEPLOYMENT_3X, "PCIe", "GPU Memory", "Diagnostic", "Targeted Stress", "Targeted Power", "Memory Bandwidth", "EUD Test"],
    ),
    "dcgmi/dcgmi_diag_r3_FAIL_8xH100_dcgm3.3.8_drv560.35.03_nccl-tests-issue264.txt": (
        "fail",
        "3.3.8",
        "560.35.03",
        None,
        [*DEPLOYMENT_3X, "PCIe", "GPU Memory", "Memory Bandwidth", "EUD Test"],
    ),
    "dcgmi/dcgmi_diag_r4_PASS_DCGM2.x-Blacklist-era_gcm-docstring.txt": (
        "pass",
        None,
        None,
        4,
        [
            "Blacklist",
            *DEPLOYMENT_3X[1:],
            "PCIe",
            "GPU Memory",
            "Diagnostic",
            "Pulse Test",
            "SM Stress",
            "Targeted Stress",
            "Targeted Power",
            "Memory Bandwidth",
            "Memtest",
        ],
    ),
    "empovit_nvidia-tools/dcgmi/samples/dcgmi-diag.log": ("pass", "4.1.1", "570.124.06", None, ["software"]),
}


@pytest.mark.parametrize("relative", sorted(REAL_DIAG))
def test_real_diag_outputs(relative):
    result, version, driver, level, names = REAL_DIAG[relative]
    parsed = dcgm.parse_diag(_real(relative))
    assert parsed["result"] == result
    assert parsed["dcgm_version"] == version
    assert parsed["driver_version"] == driver
    assert parsed["level"] == level
    assert [test["name"] for test in parsed["tests"]] == names
    assert parsed["errors"] == []


def test_dcgm3_fail_with_skips_and_wrapped_warnings():
    parsed = dcgm.parse_diag(_real("dcgmi/dcgmi_diag_r3_FAIL_8xH100_dcgm3.3.8_drv560.35.03_nccl-tests-issue264.txt"))
    tests = _tests(parsed)
    assert tests["PCIe"]["result"] == "skip"
    assert tests["PCIe"]["category"] == "Integration"
    assert tests["Memory Bandwidth"]["result"] == "skip"
    memory = tests["GPU Memory"]
    assert memory["result"] == "fail"
    assert memory["category"] == "Hardware"
    assert memory["gpus"] == {}  # "Fail - All" names no GPU
    assert len(memory["warnings"]) == 8
    # The cell cuts fall inside words ("Restar|t", "initiali|ze") and after spaces ("DCGM |and").
    assert memory["warnings"][0] == (
        "GPU 0 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. Restart DCGM. "
        "Rerun diagnostics. Unable to initialize CUDA library: 'system not yet initialized'. . Please check "
        "if a CUDA sample program can be run successfully on this host. Refer to https://github.com/nvidia/cuda-samples"
    )
    assert memory["warnings"][7].startswith("GPU 7 Error using CUDA API cuInit")
    persistence = tests["Persistence Mode"]
    assert persistence["result"] == "pass"
    assert len(persistence["info"]) == 1
    assert persistence["info"][0].startswith(
        'Persistence mode for GPU 0 is disabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.'
    )
    assert persistence["info"][0].endswith("Persistence mode for GPU 4 is disabled. Enable pers")


def test_dcgm3_verbose_info_rows():
    parsed = dcgm.parse_diag(_real("dcgmi/dcgmi_diag_r3_verbose_PASS_1xV100-PCIE-16GB_dcgm3.3.9_drv560.35.03.txt"))
    tests = _tests(parsed)
    assert tests["PCIe"]["info"] == [
        "GPU 0 GPU to Host bandwidth:  13.14 GB/s, GPU 0 Host to GPU bandwidth:  12.37 GB/s, GPU 0 bidirectional bandwidth: "
        "22.42 GB/s, GPU 0 GPU to Host latency:  2.028 us, GPU 0 Host to GPU latency:  2.127 us, GPU 0 bidirectional latency:  3.865 us"
    ]
    assert tests["Targeted Power"]["info"] == ["GPU 0 GPU 0 max power: 251.0 W average power usage: 247.8 W"]
    assert tests["Diagnostic"]["info"][0].endswith("calculated at approximately 21688.18 gigaflops during this test")
    assert tests["EUD Test"]["result"] == "skip"
    assert all(test["warnings"] == [] for test in parsed["tests"])


def test_dcgm4_per_gpu_rows():
    parsed = dcgm.parse_diag(_real("empovit_nvidia-tools/dcgmi/samples/dcgmi-diag.log"))
    software = _tests(parsed)["software"]
    assert software["category"] == "Deployment"
    assert software["result"] == "pass"
    assert software["gpus"] == {index: "pass" for index in range(8)}


def test_stas00_excerpt_split_gpu_lists_and_unterminated_row():
    parsed = dcgm.parse_diag(_real("stas00/dcgmi_diag_r2_excerpt_gpu-memory-fail-thermal.txt"))
    assert parsed["result"] == "fail"
    (memory,) = parsed["tests"]
    assert memory["name"] == "GPU Memory"
    assert memory["category"] is None  # the excerpt starts below the section header
    assert memory["gpus"] == {0: "fail", 1: "pass", 2: "pass", 3: "pass", 4: "pass", 5: "pass", 6: "pass", 7: "pass"}
    assert memory["warnings"] == [
        "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 0 Verify that the cooling "
        "on this machine is functional, including external, thermal material interface, fans, and any other components."
    ]


def test_stas00_excerpt_error_row_without_its_test_fails_the_run():
    parsed = dcgm.parse_diag(_real("stas00/dcgmi_diag_excerpt_row-remap-pending-error.txt"))
    assert parsed["tests"] == []
    assert parsed["errors"] == ["GPU 3 has uncorrectable memory errors and row remappings are pending"]
    assert parsed["result"] == "fail"


@pytest.mark.parametrize(
    "relative",
    [
        "dcgmi/dcgmi_nvlink_e_g0_head9_gcm-docstring.txt",
        "dcgmi/dcgmi_nvlink_s_8GPU-12links_no-nvswitch_gcm-docstring.txt",
        "empovit_nvidia-tools/dcgmi/samples/dcgmi-discovery.log",
        "empovit_nvidia-tools/dcgmi/samples/dcgmi-help.log",
        "empovit_nvidia-tools/dcgmi/samples/dcgmi-topo.log",
        "dcgmi/FULL_llm-action_dcgmi_H800_dcgm3.1.8.md",
    ],
)
def test_text_without_a_diag_table_is_a_parse_error(relative):
    with pytest.raises(ParseError, match="dcgmi diag"):
        dcgm.parse_diag(_real(relative))


def _fenced_blocks(markdown):
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)


def test_stas00_page_diag_blocks_parse_like_their_excerpts():
    page = _real("stas00/FULL_compute_accelerator_nvidia_debug.md")
    diag_blocks = [block for block in _fenced_blocks(page) if re.search(r"^\| (?:Diagnostic|GPU Memory) ", block, re.MULTILINE)]
    assert len(diag_blocks) == 2
    first, second = (dcgm.parse_diag(block) for block in diag_blocks)
    assert first["errors"] == ["GPU 3 has uncorrectable memory errors and row remappings are pending"]
    assert first["result"] == "fail"
    assert second["result"] == "fail"
    assert second["tests"][0]["gpus"][0] == "fail"


def test_llm_action_page_has_no_diag_block_but_its_other_outputs_parse():
    page = _real("dcgmi/FULL_llm-action_dcgmi_H800_dcgm3.1.8.md")
    blocks = _fenced_blocks(page)
    assert len(blocks) > 10
    # The page shows dcgmi -v, topo, discovery, group, dmon and nvlink, but no diag table.
    for block in blocks:
        with pytest.raises(ParseError):
            dcgm.parse_diag(block)

    (discovery,) = [block for block in blocks if "dcgmi discovery -l" in block]
    gpus = dcgm.parse_discovery(discovery)
    assert [gpu["id"] for gpu in gpus] == list(range(8))
    assert {gpu["name"] for gpu in gpus} == {"NVIDIA H800"}
    assert gpus[0]["pci_bus_id"] == "00000000:18:00.0"
    assert gpus[0]["uuid"] == "GPU-34bf77d1-c686-6821-79a8-32d326c5039c"
    assert gpus[7]["pci_bus_id"] == "00000000:E2:00.0"

    (status,) = [block for block in blocks if "dcgmi nvlink -s" in block]
    links = dcgm.parse_nvlink_status(status)
    assert sorted(links) == list(range(8))
    assert all(states == ["up"] * 8 + ["not_supported"] * 10 for states in links.values())

    (errors,) = [block for block in blocks if "dcgmi nvlink -g 1 -e\n" in block]
    counters = dcgm.parse_nvlink_errors(errors)
    assert sorted(counters) == [1]
    assert sorted(counters[1]) == list(range(8))
    assert counters[1][7] == {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}


def test_nvlink_status_gcm():
    links = dcgm.parse_nvlink_status(_real("dcgmi/dcgmi_nvlink_s_8GPU-12links_no-nvswitch_gcm-docstring.txt"))
    assert links == {index: ["up"] * 12 for index in range(8)}


def test_nvlink_status_rejects_error_counts_and_reads_them_with_parse_nvlink_errors():
    text = _real("dcgmi/dcgmi_nvlink_e_g0_head9_gcm-docstring.txt")
    with pytest.raises(ParseError, match="dcgmi nvlink -s"):
        dcgm.parse_nvlink_status(text)
    assert dcgm.parse_nvlink_errors(text) == {0: {0: {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}}}


def test_nvlink_errors_rejects_link_status():
    with pytest.raises(ParseError, match="dcgmi nvlink -e"):
        dcgm.parse_nvlink_errors(_real("dcgmi/dcgmi_nvlink_s_8GPU-12links_no-nvswitch_gcm-docstring.txt"))


def test_nvlink_status_down_and_disabled_links():
    text = "+----------------------+\n|  NvLink Link Status  |\n+----------------------+\nGPUs:\n    gpuId 0:\n        U D X _\n    gpuId 3:\n        U U U U\n"
    assert dcgm.parse_nvlink_status(text) == {0: ["up", "down", "disabled", "not_supported"], 3: ["up"] * 4}
    with pytest.raises(ParseError, match="unknown link state"):
        dcgm.parse_nvlink_status(text.replace("U D X _", "U D ? _"))


def test_discovery_empovit():
    gpus = dcgm.parse_discovery(_real("empovit_nvidia-tools/dcgmi/samples/dcgmi-discovery.log"))
    assert len(gpus) == 8
    assert gpus[0] == {
        "id": 0,
        "name": "Tesla V100-SXM2-32GB",
        "pci_bus_id": "00000000:06:00.0",
        "uuid": "GPU-174ec460-1533-c424-e029-7260db3096ae",
    }
    assert gpus[7]["pci_bus_id"] == "00000000:8A:00.0"
    assert gpus[7]["uuid"] == "GPU-a8544b18-6cba-63b6-a3ff-968559aca7f9"


def test_discovery_count_mismatch_is_an_error():
    text = _real("empovit_nvidia-tools/dcgmi/samples/dcgmi-discovery.log").replace("8 GPUs found.", "9 GPUs found.")
    with pytest.raises(ParseError, match="9 GPUs found"):
        dcgm.parse_discovery(text)


def test_discovery_rejects_diag_output():
    with pytest.raises(ParseError, match="dcgmi discovery"):
        dcgm.parse_discovery(_real("empovit_nvidia-tools/dcgmi/samples/dcgmi-diag.log"))


# Own fixtures (written in the dcgmi layouts): mixed results that no real capture shows.


def test_own_dcgm3_mixed_results():
    parsed = dcgm.parse_diag(_read(OWN / "dcgm" / "diag_r3_mixed_fail-warn-skip_dcgm3-layout.txt"))
    assert parsed["result"] == "fail"
    assert parsed["dcgm_version"] == "3.3.9"
    assert parsed["driver_version"] == "550.127.05"
    tests = _tests(parsed)
    remap = tests["Page Retirement/Row Remap"]
    assert remap["result"] == "fail"
    assert remap["warnings"] == ["GPU 2 has uncorrectable memory errors and row remappings are pending"]
    assert tests["Graphics Processes"]["result"] == "pass"
    pcie = tests["PCIe"]
    assert pcie["result"] == "pass"  # passes on 0, 1, 3 and skips 2
    assert pcie["gpus"] == {0: "pass", 1: "pass", 3: "pass", 2: "skip"}
    assert pcie["warnings"] == ["GPU 2 Skipping test because of a previous failure"]
    memory = tests["GPU Memory"]
    assert memory["result"] == "fail"
    assert memory["gpus"] == {0: "pass", 1: "pass", 2: "fail", 3: "pass"}
    assert memory["warnings"] == ["GPU 2 Detected 3 memory errors: this is a long message, wrapped at forty-five characters by dcgmi"]
    assert tests["Diagnostic"]["result"] == "warn"
    assert tests["Diagnostic"]["gpus"] == {}
    power = tests["Targeted Power"]
    assert power["result"] == "warn"
    assert power["gpus"] == {0: "pass", 1: "pass", 2: "pass", 3: "warn"}
    assert power["warnings"] == ["GPU 3 Thermal violations totaling 2.0 seconds started at 1.5 seconds into the test"]
    assert tests["Memory Bandwidth"]["result"] == "skip"


def test_own_dcgm4_entity_rows_and_labelled_messages():
    parsed = dcgm.parse_diag(_read(OWN / "dcgm" / "diag_r2_memory-fail-gpu1_dcgm4-layout.txt"))
    assert parsed["result"] == "fail"
    assert parsed["dcgm_version"] == "4.2.3"
    tests = _tests(parsed)
    assert [test["name"] for test in parsed["tests"]] == ["software", "memory", "pcie"]
    memory = tests["memory"]
    assert memory["result"] == "fail"
    assert memory["gpus"] == {0: "pass", 1: "fail"}
    assert memory["warnings"] == ["GPU1: Error using CUDA API cudaMalloc; check the GPU for ECC errors and retry"]
    assert memory["info"] == ["GPU0: Allocated 85899345920 bytes (98.1%)"]
    assert tests["pcie"]["gpus"] == {0: "pass", 1: "pass"}


def test_own_json_dcgm4_schema_shape():
    parsed = dcgm.parse_diag(_read(OWN / "dcgm" / "diag_r2_j_gpu1-memory-fail_dcgm4-schema.json"))
    assert parsed["result"] == "fail"
    assert parsed["dcgm_version"] == "4.2.3"
    assert parsed["driver_version"] == "570.133.20"
    tests = _tests(parsed)
    assert tests["software"] == {
        "name": "software",
        "category": "Deployment",
        "result": "pass",
        "gpus": {0: "pass", 1: "pass"},
        "info": [],
        "warnings": [],
    }
    assert tests["memory"]["result"] == "fail"
    assert tests["memory"]["gpus"] == {0: "pass", 1: "fail"}
    assert tests["memory"]["warnings"] == ["Error using CUDA API cudaMalloc"]
    assert tests["pcie"]["result"] == "warn"
    assert tests["pcie"]["category"] == "Integration"


def test_own_json_dcgm3_shape():
    parsed = dcgm.parse_diag(_read(OWN / "dcgm" / "diag_r1_j_all-pass_dcgm3-shape.json"))
    assert parsed["result"] == "pass"
    assert parsed["dcgm_version"] == "3.3.9"
    assert parsed["driver_version"] == "560.35.03"
    tests = _tests(parsed)
    assert tests["Persistence Mode"]["info"] == ["Persistence mode for GPU 0 is disabled."]
    assert tests["PCIe"]["result"] == "skip"
    assert tests["PCIe"]["gpus"] == {0: "skip", 1: "skip"}


def test_own_json_runtime_error_fails_the_run():
    parsed = dcgm.parse_diag(_read(OWN / "dcgm" / "diag_j_runtime-error_dcgm4-schema.json"))
    assert parsed["result"] == "fail"
    assert parsed["tests"] == []
    assert parsed["errors"] == ["Unable to run the diagnostic: the GPU group has no GPUs"]


def test_json_after_a_command_line_keeps_the_level():
    text = "$ dcgmi diag -r 2 -j\n" + _read(OWN / "dcgm" / "diag_r2_j_gpu1-memory-fail_dcgm4-schema.json")
    assert dcgm.parse_diag(text)["level"] == 2


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"DCGM Diagnostic": {"test_categories": [', "does not parse"),
        ('{"DCGM Diagnostic": {"test_categories": []}}', "no tests"),
        ('{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": [{"status": "Maybe"}]}]}]}}', "unknown status"),
    ],
)
def test_bad_json_is_a_parse_error(document, message):
    with pytest.raises(ParseError, match=message):
        dcgm.parse_diag(document)


_BORDER = "+---------------------------+------------------------------------------------+\n"


def _table(*rows):
    header = "| Diagnostic                | Result                                         |\n"
    # dcgmi closes the table with a border: without it the table may be cut short.
    return header + "".join(f"| {name:<25} | {value:<46} |\n" for name, value in rows) + (_BORDER if rows else "")


@pytest.mark.parametrize(
    ("rows", "result"),
    [
        ((("PCIe", "Skip - All"), ("GPU Memory", "Skip - All")), "skip"),
        ((("PCIe", "Skip - All"), ("GPU Memory", "Pass - All")), "pass"),
        ((("PCIe", "Warn - All"), ("GPU Memory", "Pass - All")), "warn"),
        ((("PCIe", "Warn - All"), ("GPU Memory", "Fail - GPU: 3")), "fail"),
    ],
)
def test_overall_result(rows, result):
    assert dcgm.parse_diag(_table(*rows))["result"] == result


def test_header_without_rows_and_dcgmi_errors_are_parse_errors():
    with pytest.raises(ParseError, match="no test rows"):
        dcgm.parse_diag(_table())
    with pytest.raises(ParseError, match="Diagnostic could not be run"):
        dcgm.parse_diag("Error: Diagnostic could not be run while other DCGM tools are running.\n")
    with pytest.raises(ParseError, match="empty"):
        dcgm.parse_diag("  \n")


@pytest.mark.parametrize("path", real_params("dcgmi/*"))
def test_every_dcgmi_file_parses_or_raises_parse_error(path):
    text = _read(path)
    for parser in (dcgm.parse_diag, dcgm.parse_nvlink_status, dcgm.parse_nvlink_errors, dcgm.parse_discovery):
        try:
            parser(text)
        except ParseError:
            pass


@pytest.mark.parametrize("name", ["diag_r2_j_gpu1-memory-fail_dcgm4-schema.json", "diag_j_runtime-error_dcgm4-schema.json"])
def test_own_json_fixtures_follow_dcgm_schema(name):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(_real("dcgmi/SCHEMA_dcgm_diag_schema_DCGM-repo.json"))
    # The schema names no draft ("http://json-schema.org/schema#"): pick one instead of letting jsonschema guess.
    jsonschema.Draft7Validator(schema).validate(json.loads(_read(OWN / "dcgm" / name)))


# ---------------------------------------------------------------- issue 8: cut tables, odd JSON


def _line_prefixes(text):
    lines = text.splitlines(keepends=True)
    return ["".join(lines[:count]) for count in range(1, len(lines))]


@pytest.mark.parametrize("path", real_params("dcgmi/dcgmi_diag_*") + real_params("empovit_nvidia-tools/dcgmi/samples/dcgmi-diag.log"))
def test_diag_cut_at_a_line_boundary_is_never_a_better_result(path):
    """Issue 8: without the end of the table the result is unknown (ParseError), never pass; a FAIL seen stays fail."""
    text = _read(path)
    whole = dcgm.parse_diag(text)["result"]
    for prefix in _line_prefixes(text):
        try:
            result = dcgm.parse_diag(prefix)["result"]
        except ParseError as exc:
            assert str(exc).startswith("dcgmi diag")
            continue
        assert result == "fail", f"{result} from a cut table ({whole} when whole): {prefix[-200:]!r}"


def test_diag_cut_before_a_failing_row_is_a_parse_error():
    text = _table(("PCIe", "Pass - All"), ("GPU Memory", "Fail - GPU: 3"))
    cut = text[: text.index("| GPU Memory")]
    with pytest.raises(ParseError, match="cut short"):
        dcgm.parse_diag(cut)
    assert dcgm.parse_diag(text)["result"] == "fail"


@pytest.mark.parametrize(
    "document",
    [
        '{"DCGM Diagnostic": {"test_categories": ["Deployment"]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": "t"}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [["t"]]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": {"status": "Pass"}}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": ["Pass"]}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": [{"status": ["Pass"]}]}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": [{"status": "Pass", "warnings": 5}]}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": [{"status": "Pass", "gpu_ids": {"a": 1}}]}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "test_summary": {"status": {}}}]}]}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": [{"status": "Pass"}]}]}]}, "metadata": {"version": 3}}',
        '{"DCGM Diagnostic": {"runtime_error": ["x"], "test_categories": []}}',
        '{"DCGM Diagnostic": ' * 5000 + "1" + "}" * 5000,
        "[" * 100000 + '"DCGM Diagnostic"' + "]" * 100000,
    ],
)
def test_odd_json_is_a_parse_error_not_a_crash(document):
    """Issue 8: a category list of strings gave AttributeError, deep JSON a RecursionError."""
    try:
        result = dcgm.parse_diag(document)
    except ParseError as exc:
        assert str(exc).startswith("dcgmi diag")
        return
    assert result["result"] in ("pass", "fail", "warn", "skip")


# A last line without its newline (output cut short).


def _cuts_in_line(text, needle):
    start = text.index(needle)
    return [text[:end] for end in range(start + 1, text.index("\n", start))]


def test_diag_row_cut_short_is_not_read():
    # "Error using CUDA API cudaMalloc; che" was kept as GPU1's warning; "GPU1: Fa" of a failing row likewise.
    text = _read(OWN / "dcgm" / "diag_r2_memory-fail-gpu1_dcgm4-layout.txt")
    for prefix in _cuts_in_line(text, "| Warning: GPU1"):
        memory = _tests(dcgm.parse_diag(prefix))["memory"]
        assert (memory["result"], memory["gpus"], memory["warnings"]) == ("fail", {0: "pass", 1: "fail"}, []), prefix[-60:]


def test_diag_split_gpu_list_cut_short_is_not_read():
    # DCGM 3.x "Pass - GPUs: 0, 1, 3" cut to "Pass - GPUs: 0": GPUs 1 and 3 would be missing from the list.
    text = _read(OWN / "dcgm" / "diag_r3_mixed_fail-warn-skip_dcgm3-layout.txt")
    start = text.index("| Targeted Power")
    without = dcgm.parse_diag(text[:start])
    for end in range(start + 1, text.index("\n", start)):
        assert dcgm.parse_diag(text[:end]) == without, text[start:end]


def test_nvlink_status_cut_in_a_link_list_is_an_error():
    # "U U" of twelve links: GPU 7 with two links up and ten missing.
    text = _real("dcgmi/dcgmi_nvlink_s_8GPU-12links_no-nvswitch_gcm-docstring.txt")
    start = text.index("gpuId 7:")
    for end in range(start + 1, text.index("NvSwitches:") - 1):
        if text[end - 1] != "\n" and text[: end].rsplit("\n", 1)[-1].strip():
            with pytest.raises(ParseError, match=r"^dcgmi nvlink -s: the output was cut short in the (links of GPU [67]|GPU list) \(its last line"):
                dcgm.parse_nvlink_status(text[:end])


def test_nvlink_errors_counter_cut_short_is_not_read():
    text = "+-----+-----+\n| NVLINK Error Counts |\n+-----+-----+\n| GPU 0 |  |\n| Link 0 |  |\n| -> CRC FLIT Error | 123 |\n"
    assert dcgm.parse_nvlink_errors(text) == {0: {0: {"crc_flit": 123}}}
    for end in range(text.index("| -> CRC"), len(text) - 1):
        assert dcgm.parse_nvlink_errors(text[:end]) == {0: {0: {}}}, text[:end]


def test_discovery_row_cut_short_is_an_error():
    # "Device UUID: GPU-4f2c" of the last GPU, or "Name: " with the name cut away.
    text = _real("empovit_nvidia-tools/dcgmi/samples/dcgmi-discovery.log")
    last = text.rindex("Device UUID:")
    for end in range(text.rindex("| 7 ") + 1, text.index("\n", last)):
        if text[end - 1] != "\n" and text[: end].rsplit("\n", 1)[-1].strip():
            with pytest.raises(ParseError, match=r"^dcgmi discovery -l: the output was cut short in the GPU table"):
                dcgm.parse_discovery(text[:end])
    assert dcgm.parse_discovery(text[: text.index("\n", last) + 1])[-1]["uuid"].startswith("GPU-")
