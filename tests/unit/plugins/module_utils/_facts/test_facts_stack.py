"""Table tests of the stack facts decisions (issue 24): inbox OFED, module state, DKMS kernels, Secure Boot, problems."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.stack import (
    dkms_facts,
    module_facts,
    ofed_facts,
    secure_boot_facts,
    stack_problems,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.dkms import parse_status


@pytest.mark.parametrize(
    ("parsed", "expected"),
    [
        (None, (False, "inbox", None)),  # no ofed_info: the distribution's inbox RDMA stack
        ({"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200", "release": "OFED-internal-24.10-1.1.4.0.200"}, (True, "doca-ofed", "24.10-1.1.4.0.200")),
    ],
)
def test_ofed_facts(parsed, expected):
    result = ofed_facts(parsed)
    assert (result["installed"], result["flavor"], result["version"]) == expected


INFO = {"version": "580.95.05", "signer": "DKMS module signing key", "signed": True, "filename": "/lib/modules/x/nvidia-peermem.ko", "vermagic": "x"}


@pytest.mark.parametrize(
    ("loaded", "info", "expected"),
    [
        ({"nvidia_peermem": {}}, INFO, (True, True, "580.95.05", True)),
        ({}, INFO, (False, True, "580.95.05", True)),
        ({}, None, (False, False, None, None)),  # modinfo: not found for this kernel
        (None, INFO, (None, True, "580.95.05", True)),  # lsmod absent: loaded unknown, never False
    ],
)
def test_module_facts(loaded, info, expected):
    result = module_facts(loaded, "nvidia_peermem", info)
    assert (result["loaded"], result["installed"], result["version"], result["signed"]) == expected


@pytest.mark.parametrize(
    ("status", "kernel", "expected"),
    [
        ("nvidia/580.126.20, 6.12.69+deb13-amd64, x86_64: installed\n", "6.12.73+deb13-amd64", False),  # a kernel update DKMS missed
        ("nvidia/580.126.20, 6.12.73+deb13-amd64, x86_64: installed\n", "6.12.73+deb13-amd64", True),
        (
            "nvidia, 396.45, 4.17.11-200.fc28.x86_64, x86_64: installed\nnvidia, 396.45, 4.17.14-202.fc28.x86_64, x86_64: installed\n",
            "4.17.14-202.fc28.x86_64",
            True,
        ),
        ("nvidia/580.95.05, 6.8.0-100-generic, x86_64: built\n", "6.8.0-100-generic", False),  # built, not installed
        ("rtl8852bu/1.19.3, 6.5.0, x86_64: installed\n", "6.5.0", None),  # no NVIDIA DKMS module: runfile or precompiled
        (None, "6.5.0", "absent"),
    ],
)
def test_dkms_facts(status, kernel, expected):
    result = dkms_facts(None if status is None else parse_status(status), kernel)
    if expected == "absent":
        assert result["installed"] is False and result["nvidia"] is None
    else:
        assert result["nvidia"]["built_for_running_kernel"] is expected


def test_secure_boot_facts_without_mokutil_is_unknown_not_off():
    assert secure_boot_facts(None)["state"] is None


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (
            {"kernel": "6.12.73", "dkms": {"errors": [], "nvidia": {"versions": ["580.126.20"], "kernels": ["6.12.69"], "built_for_running_kernel": False}}},
            ["not for the running kernel 6.12.73"],
        ),
        ({"dkms": {"errors": ["Could not locate dkms.conf file."], "nvidia": None}}, ["dkms status reports an error: Could not locate dkms.conf"]),
        ({"rdma": {"source": "ibstat", "errors": ["stat of IB device 'mlx5_8' failed"]}}, ["ibstat: stat of IB device 'mlx5_8'"]),
        ({"dkms": {"errors": [], "nvidia": {"built_for_running_kernel": True}}, "rdma": {"source": "ibstat", "errors": []}}, []),
    ],
)
def test_stack_problems(facts, expected):
    problems = stack_problems(facts)
    assert len(problems) == len(expected)
    assert all(part in problem for part, problem in zip(expected, problems)), problems
