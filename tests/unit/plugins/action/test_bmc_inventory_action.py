"""bmc_inventory's action plugin in Ansible's worker (through ansible-playbook): passwords holding what JSON and repr
escape are masked, the addresses and users that bmcs (no_log as a whole) also registers are not, and
validate_certs: false is warned of."""

# ruff: noqa: S105 - the passwords here are test values, checked to appear nowhere

from __future__ import annotations

import json
import pathlib
import socket
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from test_in_process import run_play, task

PASSWORD = "a\\b\t'c\"d\ne-ü"


def closed_port():
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def test_in_process_only_the_passwords_are_masked_and_unverified_certificates_are_warned_of(tmp_path):
    port = closed_port()
    bmcs = [{"name": "gpu-001", "address": "127.0.0.1", "port": port, "user": "admin", "password": PASSWORD}]
    results, output = run_play(tmp_path, [task("Read", "gpufleet.lifecycle.bmc_inventory", {"bmcs": bmcs, "timeout": 5, "validate_certs": False})])
    result = results[0]
    assert "invocation" not in result and not result.get("failed"), result
    assert result["inventories"]["gpu-001"]["error"].startswith(f"127.0.0.1:{port}: GET /redfish/v1/ failed")
    for form in (PASSWORD, repr(PASSWORD)[1:-1], json.dumps(PASSWORD)[1:-1]):
        assert form not in output
    assert "validate_certs is false: the BMCs' TLS certificates are not checked" in output
