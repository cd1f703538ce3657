# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Many BMCs' Redfish firmware inventories read at once, from the controller (private: may change without notice).

One HTTPS connection per BMC, kept open for all of its requests (the service root, the UpdateService, each page of
the FirmwareInventory collection and each of its members), Basic authentication on each request (no session is left
behind on the BMC), and a thread per BMC up to ``workers`` at a time. ``community.general.redfish_info`` makes the
same requests, but as one module run per host and a new TLS connection per request.

What a BMC answers is a finding, not a failure: a BMC that refuses, times out or answers garbage gets
``{"error": "..."}`` (what was wrong and what to do), the others ``{"entries": [...]}`` with the keys
``redfish_info``'s ``GetFirmwareInventory`` returns. Only bad parameters raise. The client follows only paths on the
BMC it was given (a link with a scheme or a host is refused: the credentials go to no other host), reads at most
MAX_BODY bytes a response, MAX_MEMBERS members and MAX_PAGES pages, and each request is bounded by ``timeout`` and
each BMC by ``total_timeout``.

With ``expand``, a BMC whose service root advertises ``ProtocolFeaturesSupported.ExpandQuery`` (DSP0266's ``$expand``:
``NoLinks`` for ``.``, else ``ExpandAll`` for ``*``; ``($levels=1)`` when it supports ``Levels``) is asked for the
collection with its members expanded: one request for the whole inventory instead of one per member. A member that
comes back as a bare link is still read on its own, and a BMC that refuses the expanded request (an HTTP error other
than 401) is read member by member: the entries are the same either way.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish.secrets import mask_own

SERVICE_ROOT = "/redfish/v1/"
# What community.general.redfish_info keeps of each member (its _software_inventory), so the records read the same.
ENTRY_KEYS = ("Name", "Id", "Status", "Version", "Updateable", "SoftwareId", "LowestSupportedVersion", "Manufacturer", "ReleaseDate")
MAX_BODY = 4 * 1024 * 1024
MAX_MEMBERS = 1024
MAX_PAGES = 64
MAX_BMCS = 100000
MESSAGE_CHARS = 300


class BmcParamError(GpufleetError):
    """A parameter of the module is wrong: nothing was read."""


class _BmcError(Exception):
    """One BMC's answer could not be used; its message becomes that BMC's ``error``."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status  # the HTTP status that made it, when it was one


def _single_line(value, field):
    if not isinstance(value, str) or not value.strip():
        raise BmcParamError(f"{field} is empty: give a value")
    if value != value.strip() or any(c in value for c in "\r\n\t\0"):
        raise BmcParamError(f"{field} {value!r} has leading or trailing white space or a control character: give it on one line, trimmed")
    return value


# The module's arguments; its action plugin checks them against the same spec (plugin_utils._in_process).
# bmcs is no_log as a whole: ansible-core logs a list as str(list), whose escaping hides a password from its masking
# (_redfish.secrets says how the result is masked then).
ARGUMENT_SPEC = dict(
    bmcs=dict(
        type="list",
        elements="dict",
        required=True,
        no_log=True,
        options=dict(
            name=dict(type="str", required=True),
            address=dict(type="str", required=True),
            port=dict(type="int", default=443),
            user=dict(type="str", required=True),
            password=dict(type="str", required=True, no_log=True),
        ),
    ),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
    timeout=dict(type="int", default=30),
    total_timeout=dict(type="int", default=300),
    workers=dict(type="int", default=32),
    expand=dict(type="bool", default=True),
)


def check_params(params):
    """Refuse what would read the wrong BMC or never end; returns the BMC list as given."""
    for field, low, high in (("timeout", 1, 600), ("total_timeout", 1, 3600), ("workers", 1, 256)):
        value = params[field]
        if not low <= value <= high:
            raise BmcParamError(f"{field} is {value}: give {low} to {high}")
    if params["total_timeout"] < params["timeout"]:
        raise BmcParamError(f"total_timeout ({params['total_timeout']} s) is shorter than timeout ({params['timeout']} s): give at least timeout")
    bmcs = params["bmcs"]
    if len(bmcs) > MAX_BMCS:
        raise BmcParamError(f"bmcs has {len(bmcs)} entries: at most {MAX_BMCS} in one call; split the hosts")
    seen = set()
    for index, bmc in enumerate(bmcs):
        where = f"bmcs[{index}]"
        name = _single_line(bmc["name"], f"{where}.name")
        if name in seen:
            raise BmcParamError(f"{where}.name {name!r} is given twice: each host's BMC once")
        seen.add(name)
        address = _single_line(bmc["address"], f"{where}.address ({name})")
        if any(c in address for c in "/?#@ ") or "://" in address:
            raise BmcParamError(
                f"{where}.address ({name}) is {address!r}: give the BMC's host name or IP address only, without a scheme, path or port "
                "(the port is bmcs[].port)"
            )
        if ":" in address:
            try:
                ipaddress.IPv6Address(address)
            except ValueError:
                raise BmcParamError(f"{where}.address ({name}) is {address!r}: give the port as bmcs[].port, not in the address") from None
        port = bmc["port"]
        if not 1 <= port <= 65535:
            raise BmcParamError(f"{where}.port ({name}) is {port}: give 1 to 65535")
        _single_line(bmc["user"], f"{where}.user ({name})")
        if not isinstance(bmc["password"], str) or not bmc["password"]:
            raise BmcParamError(f"{where}.password ({name}) is empty: give the BMC's password")
    return bmcs


INSECURE = (
    "validate_certs is false: the BMCs' TLS certificates are not checked, so anyone on the network path to a BMC can pose "
    "as it and receive its Redfish user and password (sent with every request): give the CA that signed them with ca_path "
    "(gpufleet_bmc_ca_path) and leave validate_certs on"
)


def warnings(params):
    """What the task is warned of: the risks its options take."""
    return [] if params["validate_certs"] else [INSECURE]


def tls_context(validate_certs, ca_path=None):
    if not validate_certs:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=ca_path)
    except (OSError, ssl.SSLError) as exc:
        raise BmcParamError(
            f"ca_path {ca_path!r} could not be read as a CA bundle ({exc}): give a PEM file of the CA that signed the BMCs' certificates"
        ) from None


def _host(address):
    return f"[{address}]" if ":" in address else address


def _bmc_message(doc):
    """The text of a Redfish error document (``error.message`` or its first ``@Message.ExtendedInfo``), or ''."""
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), dict):
        return ""
    err = doc["error"]
    info = err.get("@Message.ExtendedInfo")
    if isinstance(info, list) and info and isinstance(info[0], dict) and isinstance(info[0].get("Message"), str):
        return info[0]["Message"]
    return err.get("message") if isinstance(err.get("message"), str) else ""


def _link(doc, key, where):
    target = doc.get(key)
    path = target.get("@odata.id") if isinstance(target, dict) else None
    return _path(path, f"{where}: {key}")


def _path(path, what):
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//") or any(c in path for c in "\r\n\0 "):
        raise _BmcError(f"{what} is {path!r}, not a path on this BMC: it does not follow the Redfish schema (nothing else was read)")
    return path


class _Reader:
    """The requests to one BMC, over one kept-alive connection (opened again when the BMC closed it)."""

    def __init__(self, bmc, context, timeout, deadline):
        self.bmc = bmc
        self.context = context
        self.timeout = timeout
        self.deadline = deadline
        self.where = f"{_host(bmc['address'])}:{bmc['port']}"
        credential = f"{bmc['user']}:{bmc['password']}".encode()
        self.headers = {
            "Authorization": "Basic " + base64.b64encode(credential).decode("ascii"),
            "Accept": "application/json",
            "OData-Version": "4.0",
        }
        self.conn = None
        self.requests = 0
        self.connections = 0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _connection(self):
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.bmc["address"], self.bmc["port"], timeout=self.timeout, context=self.context)
            self.connections += 1
        return self.conn

    def _exchange(self, path):
        conn = self._connection()
        conn.request("GET", path, headers=self.headers)
        response = conn.getresponse()
        body = response.read(MAX_BODY + 1)
        if response.will_close:
            self.close()
        return response.status, body

    def get(self, path):
        if time.monotonic() > self.deadline:
            raise _BmcError(f"{self.where} took longer than total_timeout over {self.requests} requests: the BMC is too slow; raise total_timeout")
        # A link the BMC gave us is input: a path http.client cannot send (non-ASCII, control characters, spaces) is
        # this BMC's error, not a traceback for the whole fleet.
        if not isinstance(path, str) or not path.startswith("/") or not path.isascii() or any(ord(c) <= 32 or ord(c) == 127 for c in path):
            raise _BmcError(f"{self.where}: the BMC gave a link that is not a plain ASCII path ({path!r:.120}): not a Redfish service this module reads")
        reused = self.conn is not None
        try:
            try:
                status, body = self._exchange(path)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not reused:
                    raise
                # The BMC closed the idle kept-alive connection between two requests: a GET is safe to send again.
                self.close()
                status, body = self._exchange(path)
        except ssl.SSLCertVerificationError as exc:
            self.close()
            raise _BmcError(
                f"{self.where}: the BMC's TLS certificate could not be verified ({exc.verify_message}): give the CA that signed it "
                "with ca_path (gpufleet_bmc_ca_path), or validate_certs=false (gpufleet_bmc_validate_certs) on a network you trust"
            ) from None
        except (socket.timeout, TimeoutError):
            self.close()
            raise _BmcError(
                f"{self.where}: no answer to GET {path} within {self.timeout} s: check that the BMC is up and reachable from the controller"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
            raise _BmcError(f"{self.where}: GET {path} failed: {reason}: check the BMC's address and port and that it is reachable") from None
        self.requests += 1
        if len(body) > MAX_BODY:
            self.close()
            raise _BmcError(f"{self.where}: GET {path} answered more than {MAX_BODY} bytes: not a Redfish resource this module reads")
        try:
            doc = json.loads(body.decode("utf-8")) if body else None
        except RecursionError:
            doc = None
            if status == 200:
                raise _BmcError(f"{self.where}: GET {path} answered HTTP 200 with JSON nested too deeply to read: not a Redfish resource") from None
        except (UnicodeDecodeError, ValueError):
            doc = None
            if status == 200:
                raise _BmcError(f"{self.where}: GET {path} answered HTTP 200 with a body that is not JSON: not a Redfish service?") from None
        if status == 401:
            raise _BmcError(f"{self.where}: the BMC refused the credentials of user {self.bmc['user']!r} (HTTP 401): check bmc_user and bmc_password")
        if status != 200:
            detail = _bmc_message(doc)
            raise _BmcError(f"{self.where}: GET {path} answered HTTP {status}" + (f": {detail[:MESSAGE_CHARS]}" if detail else ""), status)
        if not isinstance(doc, dict):
            raise _BmcError(f"{self.where}: GET {path} answered JSON that is not an object: not a Redfish resource")
        return doc


def expand_query(root):
    """The ``$expand`` query the service root advertises for a collection's members (DSP0266 ExpandQuery), or None."""
    features = root.get("ProtocolFeaturesSupported")
    expand = features.get("ExpandQuery") if isinstance(features, dict) else None
    if not isinstance(expand, dict):
        return None
    # Members are subordinate resources, not Links: "." expands them and nothing else; "*" also expands Links.
    token = "." if expand.get("NoLinks") is True else "*" if expand.get("ExpandAll") is True else None
    if token is None:
        return None
    return f"$expand={token}($levels=1)" if expand.get("Levels") is True else f"$expand={token}"


def _expanded(member):
    """The member's own properties when the BMC expanded it (a SoftwareInventory's required Id and Name, not only its
    link), else None."""
    return member if isinstance(member, dict) and "Id" in member and "Name" in member else None


def _first_page(reader, page, query):
    """The collection's first page, expanded when query is given and the BMC takes it: (document, query used)."""
    if query:
        try:
            return reader.get(f"{page}?{query}"), query
        except _BmcError as exc:
            if exc.status is None or exc.status == 401:
                raise
            # It advertised $expand but refused it: the inventory is read member by member instead.
    return reader.get(page), None


def read_one(bmc, context, timeout, total_timeout, expand=True):
    """``{"entries": [...], "expand": Q, "requests": N, "connections": K, "seconds": S}`` or ``{"error": ..., ...}``
    for one BMC (Q: the ``$expand`` query the inventory was read with, or None)."""
    start = time.monotonic()
    reader = _Reader(bmc, context, timeout, start + total_timeout)
    used = None
    try:
        root = reader.get(SERVICE_ROOT)
        update_service = reader.get(_link(root, "UpdateService", SERVICE_ROOT))
        page = _link(update_service, "FirmwareInventory", "UpdateService")
        entries = []
        for number in range(MAX_PAGES):
            if number == 0:
                collection, used = _first_page(reader, page, expand_query(root) if expand else None)
            else:
                collection = reader.get(page)
            members = collection.get("Members")
            if not isinstance(members, list):
                raise _BmcError(f"{reader.where}: {page} has no Members list: not a firmware inventory collection")
            if len(entries) + len(members) > MAX_MEMBERS:
                raise _BmcError(f"{reader.where}: the firmware inventory has more than {MAX_MEMBERS} members: not read")
            for index, member in enumerate(members):
                path = _path(member.get("@odata.id") if isinstance(member, dict) else None, f"{page}: Members[{index}]")
                item = _expanded(member) or reader.get(path)
                entries.append({key: item[key] for key in ENTRY_KEYS if key in item})
            following = collection.get("Members@odata.nextLink")
            if following is None:
                break
            page = _path(following, f"{page}: Members@odata.nextLink")
        else:
            raise _BmcError(f"{reader.where}: the firmware inventory has more than {MAX_PAGES} pages: not read")
        result = {"entries": entries, "expand": used}
    except _BmcError as exc:
        result = {"error": str(exc)}
    finally:
        reader.close()
    result.update(requests=reader.requests, connections=reader.connections, seconds=round(time.monotonic() - start, 3))
    return result


def read_all(bmcs, context, timeout, total_timeout, workers, expand=True):
    """``{name: read_one(...)}`` for every BMC, ``workers`` of them at a time, each masked with its own password (the
    only one it was sent): linear in the fleet, where masking each with every password is quadratic."""
    if not bmcs:
        return {}
    with ThreadPoolExecutor(max_workers=min(workers, len(bmcs)), thread_name_prefix="bmc_inventory") as pool:
        futures = {bmc["name"]: (pool.submit(read_one, bmc, context, timeout, total_timeout, expand), bmc["password"]) for bmc in bmcs}
    return {name: mask_own(future.result(), password) for name, (future, password) in futures.items()}


def run(params):
    bmcs = check_params(params)
    context = tls_context(params["validate_certs"], params.get("ca_path"))
    start = time.monotonic()
    inventories = read_all(bmcs, context, params["timeout"], params["total_timeout"], params["workers"], params.get("expand", True))
    errors = sorted(name for name, result in inventories.items() if "error" in result)
    return {
        "changed": False,
        "inventories": inventories,
        "summary": {
            "bmcs": len(inventories),
            "read": len(inventories) - len(errors),
            "errors": errors,
            "requests": sum(r["requests"] for r in inventories.values()),
            "connections": sum(r["connections"] for r in inventories.values()),
            "seconds": round(time.monotonic() - start, 3),
        },
    }
