# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The BMC's TLS certificate, checked before nvfwupd gets the BMC's password (private: may change without notice).

NVIDIA's nvfwupd calls Redfish with ``verify=False``: it would send the password to whoever answers at the BMC's address.
So the module first opens a TLS connection of its own, verified against ``bmc.ca_path`` (or the system's CAs) with the
host name checked, and sends one ``GET /redfish/v1/`` without credentials; only then is the config file written.
"""

from __future__ import annotations

import http.client
import socket
import ssl

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

SERVICE_ROOT = "/redfish/v1/"
CHECK_TIMEOUT = 30  # seconds per network step of the check (connect, handshake, answer); less when timeout has less left
MAX_BODY = 64 * 1024
WHAT_TO_DO = (
    "give the CA (PEM) that signed the BMC's certificate as bmc.ca_path (gpufleet_bmc_ca_path with the gpu_firmware role), "
    "or set bmc.validate_certs false (gpufleet_bmc_validate_certs) only on a management network you trust"
)
NOT_RUN = "nvfwupd was not run and got no password"


class BmcCertificateError(GpufleetError):
    """The BMC's certificate was not verified (or the BMC could not be reached to verify it): nothing was run."""


def insecure_warning(where):
    return (
        f"bmc.validate_certs is false: the TLS certificate of the BMC at {where} is not checked, and nvfwupd checks none "
        "itself, so anyone on the network path to the BMC can pose as it and receive the BMC's user and password. "
        "Give the CA that signed it as bmc.ca_path (gpufleet_bmc_ca_path) and leave validate_certs on"
    )


def where(address, port):
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def context(ca_path=None):
    """A verifying TLS context (host name checked) trusting ``ca_path``, or the system's CAs when it is None."""
    try:
        return ssl.create_default_context(cafile=ca_path)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BmcCertificateError(
            f"bmc.ca_path {ca_path} could not be read as a CA bundle ({reason[:200]}): {NOT_RUN}. Give a PEM file of the CA that signed the BMC's certificate"
        ) from None


def problem(exc, at, timeout):
    """What failed, and what to do, for an exception of the check against the BMC at ``at`` (no secret: none was sent)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the TLS certificate of the BMC at {at} could not be verified ({getattr(exc, 'verify_message', None) or exc}): {NOT_RUN}. {WHAT_TO_DO}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return (
            f"the TLS certificate check of the BMC at {at} did not finish within {timeout} s: the BMC does not answer "
            f"({NOT_RUN}; check that it is up, or raise timeout)"
        )
    if isinstance(exc, ssl.SSLError):
        return (
            f"no TLS connection could be made with the BMC at {at} ({getattr(exc, 'reason', None) or exc}): {NOT_RUN}. Check that bmc.port is the "
            f"BMC's HTTPS port; {WHAT_TO_DO}"
        )
    if isinstance(exc, OSError):
        reason = exc.strerror or type(exc).__name__
        return f"the BMC at {at} could not be reached to check its TLS certificate ({reason}): {NOT_RUN}. Check bmc.address and bmc.port"
    return f"the BMC at {at} gave no HTTP answer over its verified TLS connection ({type(exc).__name__}): {NOT_RUN}. Check bmc.port"


def check(address, port, ca_path=None, timeout=CHECK_TIMEOUT):
    """Return the HTTP status of ``GET /redfish/v1/`` (no credentials) over TLS verified for ``address``; any status will do:
    the certificate is what is checked. Raise BmcCertificateError otherwise."""
    tls = context(ca_path)
    conn = http.client.HTTPSConnection(address, port, timeout=timeout, context=tls)
    try:
        conn.request("GET", SERVICE_ROOT, headers={"Accept": "application/json"})
        response = conn.getresponse()
        response.read(MAX_BODY)
        return response.status
    except (OSError, http.client.HTTPException) as exc:  # ssl.SSLError and socket.timeout are OSErrors
        raise BmcCertificateError(problem(exc, where(address, port), timeout), bmc=where(address, port)) from None
    finally:
        conn.close()
