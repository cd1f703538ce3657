"""nvidia-smi nvlink -s: own and real captures, and the outputs that must not pass as a link list."""

from __future__ import annotations

import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.nvlink import parse_status

from tests.conftest import REAL, real_params

OWN = pathlib.Path(__file__).resolve().parents[4] / "fixtures" / "validate"


def test_own_fixture_with_an_inactive_link():
    gpus = parse_status((OWN / "nvsmi_nvlink_s_2gpu_gpu1-link1-inactive.txt").read_text())
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1]["uuid"] == "GPU-7d1e2f30-4a5b-4c6d-8e9f-a0b1c2d3e4f5"
    assert gpus[1]["name"] == "NVIDIA H100 80GB HBM3"
    assert [(link["link"], link["up"], link["gbps"]) for link in gpus[1]["links"]] == [(0, True, 26.562), (1, False, None)]
    assert gpus[1]["links"][1]["raw"] == "<inactive>"


@pytest.mark.parametrize("path", real_params("nvidia-smi/nvsmi_nvlink_s_GB200_*"))
def test_real_gb200_capture(path):
    gpus = parse_status(path.read_text())
    # read from the file: GPU 0 is an NVIDIA GB200 with 18 links at 53.125 GB/s
    assert gpus[0]["name"] == "NVIDIA GB200"
    assert gpus[0]["uuid"] == "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde"
    assert len(gpus[0]["links"]) == 18
    assert {link["gbps"] for link in gpus[0]["links"]} == {53.125}
    assert all(link["up"] for gpu in gpus for link in gpu["links"])


@pytest.mark.parametrize("path", real_params("empovit_nvidia-tools/nvidia-smi/samples/nvlink-s.log"))
def test_real_v100_capture_every_gpu_six_links_up(path):
    text = path.read_text()
    gpus = parse_status(text)
    assert len(gpus) == text.count("GPU ") and len(gpus) >= 2
    assert {len(gpu["links"]) for gpu in gpus} == {6}
    assert {link["gbps"] for gpu in gpus for link in gpu["links"]} == {25.781}


@pytest.mark.parametrize("path", real_params("nvgpuexp_captures/split_h*-mig__*/*nvlink-s.txt"))
def test_real_mig_capture_is_unsupported_not_down(path):
    gpus = parse_status(path.read_text())
    assert gpus[0]["links"] == []
    assert "not supported" in gpus[0]["unsupported"]


@pytest.mark.parametrize("path", real_params("nvgpuexp_captures/split_l40s__*/*nvlink-s.txt"))
def test_real_l40s_without_nvlink_keeps_its_message(path):
    gpus = parse_status(path.read_text())
    assert gpus[0]["links"] == [] and gpus[0]["unsupported"] is None
    assert gpus[0]["notes"] == ["Device does not have or support Nvlink"]


def test_real_a10_capture_has_no_links():
    path = REAL / "nvidia-smi" / "nvsmi_nvlink_s_A10_gpud.txt"
    if not path.exists():
        pytest.skip("../shared/fixtures/real is absent")
    assert parse_status(path.read_text()) == []


@pytest.mark.parametrize("text", ["", "\n\n", None])
def test_empty_output_is_no_nvlink(text):
    assert parse_status(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Failed to initialize NVML: Unknown Error\n", r"^nvidia-smi nvlink -s: no 'GPU n:' line in the output, which starts 'Failed to initialize NVML"),
        ("\t Link 0: 26.562 GB/s\n", r"^nvidia-smi nvlink -s: link line 'Link 0: 26.562 GB/s' before any 'GPU n:' line"),
        ("GPU 0: H100 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 0: 26.562 GB/s\n", r"GPU 0 lists link 0 twice"),
        ("GPU 0: H100 (UUID: GPU-a)\nGPU 0: H100 (UUID: GPU-a)\n", r"GPU 0 is listed twice"),
    ],
)
def test_output_that_is_not_a_link_list_raises_parse_error_naming_the_tool(text, expected):
    with pytest.raises(ParseError, match=expected):
        parse_status(text)


def test_a_link_value_that_is_not_a_speed_is_down_not_up():
    gpus = parse_status("GPU 0: H100 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s trailing\n\t Link 1: Disabled\n")
    assert [(link["up"], link["raw"]) for link in gpus[0]["links"]] == [(False, "26.562 GB/s trailing"), (False, "Disabled")]


def test_a_cut_speed_is_an_error_not_a_link_down():
    # "Link 0: 26.5" of 26.562 GB/s read as a link that does not print its speed: down.
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c0b6e0e-8b8f-4c4b-9a53-0f1b2e1c3d4e)\n\t Link 0: 26.562 GB/s\n"
    for end in range(text.index("Link 0:") + len("Link 0"), len(text) - 1):
        with pytest.raises(ParseError, match=r"^nvidia-smi nvlink -s: the output was cut short in link 0 of GPU 0 \(its last line"):
            parse_status(text[:end])
    assert parse_status(text)[0]["links"] == [{"link": 0, "up": True, "gbps": 26.562, "raw": "26.562 GB/s"}]


def test_every_prefix_that_ends_inside_a_line_is_an_error():
    # A cut UUID ("GPU-7d1e") or a GPU line whose links are missing is no GPU to judge either.
    text = (OWN / "nvsmi_nvlink_s_2gpu_gpu1-link1-inactive.txt").read_text()
    for end in range(1, len(text)):
        if text[: end].rsplit("\n", 1)[-1].strip():
            with pytest.raises(ParseError, match=r"^nvidia-smi nvlink -s: the output was cut short in (GPU|link \d of GPU|the lines of GPU|its first line)"):
                parse_status(text[:end])
