"""The BMC certificate check's messages: what failed and what to do, per failure (no network here)."""

from __future__ import annotations

import http.client
import socket
import ssl

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import bmc_certificate


def _verify_error():
    exc = ssl.SSLCertVerificationError(1, "certificate verify failed")
    exc.verify_message = "self-signed certificate"
    return exc


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            _verify_error(),
            [
                "TLS certificate of the BMC at 10.0.0.1:443 could not be verified (self-signed certificate)",
                "bmc.ca_path",
                "gpufleet_bmc_ca_path",
                "bmc.validate_certs false",
                "nvfwupd was not run",
            ],
        ),
        (socket.timeout("timed out"), ["did not finish within 7 s", "does not answer", "raise timeout", "nvfwupd was not run"]),
        (TimeoutError(), ["did not finish within 7 s"]),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), ["no TLS connection could be made", "HTTPS port"]),
        (ConnectionRefusedError(111, "Connection refused"), ["could not be reached", "(Connection refused)", "bmc.address and bmc.port"]),
        (http.client.BadStatusLine("garbage"), ["gave no HTTP answer", "BadStatusLine"]),
    ],
    ids=["unverified", "socket-timeout", "timeout", "not-tls", "refused", "not-http"],
)
def test_each_failure_says_what_to_do(exc, expected):
    message = bmc_certificate.problem(exc, "10.0.0.1:443", 7)
    for part in expected:
        assert part in message, (part, message)


@pytest.mark.parametrize(
    ("address", "port", "expected"), [("10.0.0.1", 443, "10.0.0.1:443"), ("fd00::5", 8443, "[fd00::5]:8443"), ("bmc-01.mgmt", 443, "bmc-01.mgmt:443")]
)
def test_where(address, port, expected):
    assert bmc_certificate.where(address, port) == expected


def test_a_ca_path_that_is_no_pem_names_the_option(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(bmc_certificate.BmcCertificateError, match=r"^bmc\.ca_path .* could not be read as a CA bundle"):
        bmc_certificate.context(str(bad))


def test_the_context_verifies_and_checks_the_host_name():
    context = bmc_certificate.context(None)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname is True
