"""gpu_validate's dcgm check (issue 24): the verdict as a table, dcgmi -v read on the real captures, and the commands it runs
(dcgmi -v, then dcgmi discovery -l only where the host engine did not answer) with garbled output as a failed check."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom_stack import normalize
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import stack as stack_checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stack import dcgm_verdict, read_build_info

from tests.conftest import real_files

# (wanted, client, hostengine, answered, error, garbled) -> (status, words the message must hold)
CASES = {
    "answers-at-the-boms-version": (("4.7.0", "4.7.0", "4.7.0", True, None, None), ("pass", ["answers, version 4.7.0"])),
    "answers-no-version-asked": ((None, "3.3.9", "3.3.9", True, None, None), ("pass", ["answers (version 3.3.9)"])),
    "host-engine-down": (
        ("4.7.0", "4.7.0", None, False, "Error: unable to establish a connection to the specified host: localhost", None),
        ("fail", ["does not answer", "unable to establish a connection", "systemctl start nvidia-dcgm"]),
    ),
    "host-engine-not-restarted-after-upgrade": (("4.7.0", "4.7.0", "4.5.3", True, None, None), ("fail", ["runs 4.5.3", "systemctl restart nvidia-dcgm"])),
    "whole-dcgm-of-another-version": (
        ("4.7.0", "4.5.3", "4.5.3", True, None, None), ("fail", ["is 4.5.3, the BOM's is 4.7.0", "install datacenter-gpu-manager 4.7.0"]),
    ),
    "client-of-another-version": (("4.7.0", "4.5.3", "4.7.0", True, None, None), ("fail", ["dcgmi is 4.5.3"])),
    # dcgmi -v waits only 100 ms: discovery answered, the host engine's version is unknown: a warning, never a silent pass.
    "answers-to-discovery-only": (("4.7.0", "4.7.0", None, True, None, None), ("warn", ["did not report its version", "nv-hostengine --version"])),
    "garbled": (("4.7.0", None, None, False, None, "dcgmi -v: no 'Version :' line"), ("fail", ["cannot be read", "run 'dcgmi -v'", "skip_checks"])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dcgm_verdict(case):
    args, (status, words) = CASES[case]
    verdict = dcgm_verdict(*args)
    assert verdict[0] == status, verdict
    for word in words:
        assert word in verdict[3], (word, verdict[3])


def test_real_dcgmi_v_capture_gives_the_client_and_the_host_engine():
    files = real_files("stack/dcgm/dcgmi_-v_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    text = files[0].read_text()
    output = text[text.index("\n") + 1:]  # the prompt line is not dcgmi's
    assert read_build_info(0, output) == {"client": "4.7.0", "hostengine": "4.7.0", "garbled": None}
    # Real dcgmi prints the host engine's block only when it connected (dcgmi/Version.cpp): without it, no answer.
    local_only = output[: output.index("Hostengine build info:")]
    assert read_build_info(255, local_only) == {"client": "4.7.0", "hostengine": None, "garbled": None}
    # Cut inside the host engine's block, before its Version line, by a dcgmi that exited 0: garbled, not a pass.
    cut = output[: output.index("Hostengine build info:")] + "Hostengine build info:\nBuild ID : 24637\n"
    assert read_build_info(0, cut)["garbled"].startswith("dcgmi -v: ")


@pytest.mark.parametrize(("rc", "out", "expected"), [
    (255, "Error: unable to establish a connection to the specified host: localhost\n", {"client": None, "hostengine": None, "garbled": None}),
    (0, "\x00\xff", {"client": None, "hostengine": None, "garbled": "dcgmi -v: no 'Version : <version>' line in '\\x00ÿ'"}),
])
def test_read_build_info_of_a_failure_and_of_garbage(rc, out, expected):
    assert read_build_info(rc, out) == expected


class FakeDcgmi:
    binary = "dcgmi"
    available = True

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def run(self, args, ok_rcs=(0,), timeout=None):
        self.calls.append(list(args))
        return self.answers[" ".join(args)]


class Ctx:
    def __init__(self, stack, checks=None):
        self.options = {"expected_stack": normalize(stack), "command_timeout": 120, "checks": checks}


V_BOTH = "\nLocal build info:\nVersion : 3.3.9\n\nHostengine build info:\nVersion : 3.3.9\n"
DISCOVERY = (
    "1 GPU found.\n+--------+----------------------------------------------------------------------+\n"
    "| GPU ID | Device Information                                                   |\n"
    "+--------+----------------------------------------------------------------------+\n"
    "| 0      | Name: NVIDIA H100 80GB HBM3                                          |\n"
    "|        | PCI Bus ID: 00000000:18:00.0                                         |\n"
    "|        | Device UUID: GPU-34bf77d1-c686-6821-79a8-32d326c5039c                |\n"
    "+--------+----------------------------------------------------------------------+\n"
    "0 NvSwitches found.\n"
)
DOWN = (255, "Error: unable to establish a connection to the specified host: localhost\nError: Unable to connect to host engine.\n", "")


@pytest.mark.parametrize(
    ("answers", "status", "calls"),
    [
        ({"-v": (0, V_BOTH, "")}, "pass", [["-v"]]),
        ({"-v": DOWN, "discovery -l": DOWN}, "fail", [["-v"], ["discovery", "-l"]]),
        ({"-v": (243, "\nLocal build info:\nVersion : 3.3.9\n", ""), "discovery -l": (0, DISCOVERY, "")}, "warn", [["-v"], ["discovery", "-l"]]),
        ({"-v": (243, "\nLocal build info:\nVersion : 3.3.9\n", ""), "discovery -l": (0, "1 GPU found.\n| GPU", "")}, "fail", [["-v"], ["discovery", "-l"]]),
        ({"-v": (0, "garbage\n", "")}, "fail", [["-v"]]),
    ],
    ids=["answers", "down", "slow-to-v-answers-discovery", "discovery-garbled", "v-garbled"],
)
def test_check_runs_dcgmi_v_and_discovery_only_when_needed(monkeypatch, answers, status, calls):
    dcgmi = FakeDcgmi(answers)
    monkeypatch.setattr(stack_checks, "_tool", lambda ctx, cls, option=None: dcgmi)
    result = stack_checks.check_dcgm(Ctx({"dcgm": "3.3.9"}))
    assert result["status"] == status, result
    assert dcgmi.calls == calls


def test_check_skips_without_a_bom_version_unless_asked_for_by_name(monkeypatch):
    dcgmi = FakeDcgmi({"-v": (0, V_BOTH, "")})
    monkeypatch.setattr(stack_checks, "_tool", lambda ctx, cls, option=None: dcgmi)
    skipped = stack_checks.check_dcgm(Ctx({}))
    assert skipped["status"] == "skip" and "names no DCGM version" in skipped["message"] and dcgmi.calls == []
    asked = stack_checks.check_dcgm(Ctx({}, checks=["dcgm"]))
    assert asked["status"] == "pass" and asked["expected"] == {"hostengine": "answers", "version": None}
