"""bmc_inventory against gpusim's BMC (tests/gpusim/bmc) in-process: real HTTPS on 127.0.0.1, real TLS, real Redfish routes.

The module file is also run the way Ansible runs it (``python bmc_inventory.py args.json``, the real AnsibleModule), so
what a user sees - the result, ``invocation`` with the password masked, the refusals - is what is checked.
"""

# ruff: noqa: S105, S106 - the passwords here are test values, checked to appear nowhere

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[4]
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish import inventory  # noqa: E402
from gpusim import firmware, state  # noqa: E402
from gpusim.bmc import cert, redfish, server  # noqa: E402

USER, PASSWORD = "admin", "s3cret-Pw-7"
SPEC = {
    "sku": "hgx-h100",
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "gpu_count": 8,
    "nvswitch": True,
    "driver": "550.90.07",
    "kernel_module": "open",
    "fabricmanager": "550.90.07",
    "vbios": None,
    "gpu_firmware": None,
    "kernel": "5.15.0-119-generic",
    "faults": [],
    "timing": {},
    "perf": {},
    "jobs": 0,
    "nics": [{"type": "ConnectX-7", "psid": "MT_0000000838", "part_number": "MCX755106AS-HEA_Ax", "fw": "28.39.1002"}],
}


class Fleet:
    def __init__(self, tmp_path, names):
        self.dirs = {}
        for name in names:
            d = tmp_path / name
            d.mkdir()
            state.save(d, state.new_node_state(dict(SPEC, name=name)))
            self.dirs[name] = d
        self.cafile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
        cert.make_self_signed(self.cafile, keyfile, ["127.0.0.1"], ["localhost"], "test")
        self.log = []
        self.server = server.Server(
            [server.Endpoint(n, d, "127.0.0.1", 0) for n, d in self.dirs.items()], USER, PASSWORD, self.cafile, keyfile, log=self.log.append, workers=4
        )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bmc(self, name, **override):
        address, port = self.server.bound[name]
        return dict({"name": name, "address": address, "port": port, "user": USER, "password": PASSWORD}, **override)

    def expected(self, name):
        """What the node's firmware inventory holds, from the node's own state (not from the BMC's answer)."""
        return {row["id"]: row["version"] for row in firmware.inventory(state.load(self.dirs[name]))}

    def stop(self):
        self.server.stop()
        self.thread.join(5)


@pytest.fixture
def fleet(tmp_path):
    made = []

    def _make(*names):
        made.append(Fleet(tmp_path, names))
        return made[-1]

    yield _make
    for f in made:
        f.stop()


def params(bmcs, **kw):
    return dict({"bmcs": bmcs, "validate_certs": True, "ca_path": None, "timeout": 10, "total_timeout": 60, "workers": 8}, **kw)


def test_reads_every_bmc_over_one_connection_each(fleet):
    f = fleet("gpu-01", "gpu-02")
    result = inventory.run(params([f.bmc("gpu-01"), f.bmc("gpu-02")], ca_path=str(f.cafile)))
    assert result["changed"] is False
    assert result["summary"]["errors"] == [] and result["summary"]["read"] == 2
    for name in ("gpu-01", "gpu-02"):
        got = result["inventories"][name]
        assert "error" not in got
        assert {e["Id"]: e["Version"] for e in got["entries"]} == f.expected(name)
        assert all(set(e) <= set(inventory.ENTRY_KEYS) for e in got["entries"])
        assert all(e["Status"] == {"State": "Enabled", "Health": "OK"} for e in got["entries"])
        # The service root, the UpdateService, the collection and each member: all on one kept-alive TLS connection.
        assert got["requests"] == 3 + len(got["entries"])
        assert got["connections"] == 1


def test_a_bmc_that_closes_its_connections_is_read_on_new_ones(fleet, monkeypatch):
    monkeypatch.setattr(server, "MAX_REQUESTS", 4)  # the BMC answers its 4th request on a connection with 'Connection: close'
    f = fleet("gpu-01")
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False))["inventories"]["gpu-01"]
    assert {e["Id"]: e["Version"] for e in got["entries"]} == f.expected("gpu-01")
    assert got["connections"] == -(-got["requests"] // 4) > 1


def test_wrong_password_is_that_bmcs_finding_and_the_others_are_read(fleet):
    f = fleet("gpu-01", "gpu-02")
    result = inventory.run(params([f.bmc("gpu-01", password="wrong-pw-1"), f.bmc("gpu-02")], validate_certs=False))
    bad = result["inventories"]["gpu-01"]
    assert "entries" not in bad
    assert "refused the credentials of user 'admin' (HTTP 401): check bmc_user and bmc_password" in bad["error"]
    assert result["summary"]["errors"] == ["gpu-01"]
    assert {e["Id"] for e in result["inventories"]["gpu-02"]["entries"]} == set(f.expected("gpu-02"))
    assert "wrong-pw-1" not in json.dumps(result) and PASSWORD not in json.dumps(result)


def test_an_unverified_certificate_says_how_to_trust_it(fleet):
    f = fleet("gpu-01")
    got = inventory.run(params([f.bmc("gpu-01")]))["inventories"]["gpu-01"]
    assert "TLS certificate could not be verified" in got["error"]
    assert "give the CA that signed it with ca_path (gpufleet_bmc_ca_path)" in got["error"]
    assert got["requests"] == 0


def test_a_hung_bmc_costs_one_timeout_not_the_run(fleet):
    f = fleet("gpu-01", "gpu-02")
    state.update(f.dirs["gpu-01"], lambda s: state.apply_fault(s, "bmc_unresponsive"))
    start = time.monotonic()
    result = inventory.run(params([f.bmc("gpu-01"), f.bmc("gpu-02")], validate_certs=False, timeout=2, total_timeout=5))
    assert time.monotonic() - start < 10
    assert "no answer to GET /redfish/v1/ within 2 s" in result["inventories"]["gpu-01"]["error"]
    assert "entries" in result["inventories"]["gpu-02"]


def test_a_closed_port_is_a_finding():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    got = inventory.run(params([{"name": "gpu-09", "address": "127.0.0.1", "port": port, "user": USER, "password": PASSWORD}]))
    assert got["inventories"]["gpu-09"]["error"].startswith(f"127.0.0.1:{port}: GET /redfish/v1/ failed: ")
    assert "check the BMC's address and port" in got["inventories"]["gpu-09"]["error"]


@pytest.mark.parametrize(
    "doc, expect",
    [
        (
            {"UpdateService": {"@odata.id": "https://evil.example/redfish/v1/UpdateService"}},
            "UpdateService is 'https://evil.example/redfish/v1/UpdateService', not a path on this BMC",
        ),
        ({"UpdateService": "nope"}, "UpdateService is None, not a path on this BMC"),
        ({}, "UpdateService is None, not a path on this BMC"),
    ],
)
def test_a_link_off_the_bmc_is_refused(fleet, monkeypatch, doc, expect):
    f = fleet("gpu-01")
    service = f.server.service("gpu-01")
    monkeypatch.setattr(service, "service_root", lambda: doc)
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False))["inventories"]["gpu-01"]
    assert expect in got["error"]
    assert got["requests"] == 1  # nothing followed


def test_a_member_link_to_another_host_is_refused(fleet, monkeypatch):
    f = fleet("gpu-01")
    real = inventory._Reader.get

    def get(self, path):
        doc = real(self, path)
        if path.endswith("/FirmwareInventory"):
            doc["Members"][1] = {"@odata.id": "//evil.example/steal"}
        return doc

    monkeypatch.setattr(inventory._Reader, "get", get)
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False))["inventories"]["gpu-01"]
    assert "Members[1] is '//evil.example/steal', not a path on this BMC" in got["error"]


def test_a_bmc_answering_json_nested_too_deeply_is_that_bmcs_error_and_the_others_are_read(fleet, monkeypatch):
    """200 kB of JSON nested 100,000 deep (under the size cap) ended the whole fleet's task with a RecursionError."""
    f = fleet("gpu-01", "gpu-02")
    real = inventory._Reader._exchange

    def exchange(self, path):
        if self.bmc["name"] == "gpu-01" and path == "/redfish/v1/":
            return 200, b"[" * 100_000 + b"]" * 100_000
        return real(self, path)

    monkeypatch.setattr(inventory._Reader, "_exchange", exchange)
    got = inventory.run(params([f.bmc("gpu-01"), f.bmc("gpu-02")], validate_certs=False))["inventories"]
    assert "nested too deeply to read" in got["gpu-01"]["error"], got["gpu-01"]
    assert "error" not in got["gpu-02"] and {e["Id"]: e["Version"] for e in got["gpu-02"]["entries"]} == f.expected("gpu-02")


@pytest.mark.parametrize("link", ["/redfish/v1/UpdateService/FirmwareInventory/GPU_\u00e9", "/redfish/v1/\u0430bc"])
def test_a_member_link_http_cannot_send_is_that_bmcs_error(fleet, monkeypatch, link):
    """A non-ASCII character in a member link ended the fleet's task with http.client's UnicodeEncodeError."""
    f = fleet("gpu-01", "gpu-02")
    real = inventory._Reader.get

    def get(self, path):
        doc = real(self, path)
        if self.bmc["name"] == "gpu-01" and path.endswith("/FirmwareInventory") and isinstance(doc.get("Members"), list):
            doc["Members"][1] = {"@odata.id": link}
        return doc

    monkeypatch.setattr(inventory._Reader, "get", get)
    got = inventory.run(params([f.bmc("gpu-01"), f.bmc("gpu-02")], validate_certs=False, expand=False))["inventories"]
    assert "not a plain ASCII path" in got["gpu-01"]["error"] and "nothing else was read" not in got["gpu-01"]["error"], got["gpu-01"]
    assert "error" not in got["gpu-02"], got["gpu-02"]


# What OpenBMC's bmcweb advertises when built with $expand (insecure-enable-redfish-query).
BMCWEB_EXPAND = {"ExpandAll": True, "Levels": True, "Links": True, "NoLinks": True, "MaxLevels": 6}


def test_a_bmc_that_advertises_expand_answers_the_inventory_in_one_request(fleet):
    f = fleet("gpu-01", "gpu-02")
    f.server.service("gpu-01").expand_query = BMCWEB_EXPAND
    result = inventory.run(params([f.bmc("gpu-01"), f.bmc("gpu-02")], validate_certs=False))
    fast, plain = result["inventories"]["gpu-01"], result["inventories"]["gpu-02"]
    assert fast["expand"] == "$expand=.($levels=1)" and plain["expand"] is None
    # The service root, the UpdateService and the expanded collection; the same entries as member by member.
    assert fast["requests"] == 3 < plain["requests"] == 3 + len(plain["entries"])
    assert {e["Id"]: e["Version"] for e in fast["entries"]} == f.expected("gpu-01")
    assert [set(e) for e in fast["entries"]] == [set(e) for e in plain["entries"]]
    assert all(set(e) <= set(inventory.ENTRY_KEYS) for e in fast["entries"])


def test_expand_false_reads_member_by_member(fleet):
    f = fleet("gpu-01")
    f.server.service("gpu-01").expand_query = BMCWEB_EXPAND
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False, expand=False))["inventories"]["gpu-01"]
    assert got["expand"] is None and got["requests"] == 3 + len(got["entries"])
    assert {e["Id"]: e["Version"] for e in got["entries"]} == f.expected("gpu-01")


@pytest.mark.parametrize(
    "advertised, query",
    [
        ({"ExpandAll": True}, "$expand=*"),
        ({"ExpandAll": True, "Levels": True}, "$expand=*($levels=1)"),
        ({"NoLinks": True}, "$expand=."),
        ({"Links": True}, None),  # "~" alone would expand only Links, not Members
        ({"ExpandAll": False, "NoLinks": "yes"}, None),
    ],
)
def test_the_expand_query_follows_what_the_service_root_advertises(advertised, query):
    assert inventory.expand_query({"ProtocolFeaturesSupported": {"ExpandQuery": advertised}}) == query
    assert inventory.expand_query({}) is None
    assert inventory.expand_query({"ProtocolFeaturesSupported": "garbage"}) is None


def test_a_bmc_that_advertises_expand_but_refuses_it_is_read_member_by_member(fleet, monkeypatch):
    f = fleet("gpu-01")
    service = f.server.service("gpu-01")
    service.expand_query = BMCWEB_EXPAND
    real = service.firmware_inventory
    monkeypatch.setattr(service, "firmware_inventory", lambda query: redfish.error(501, "Base.1.16.0.QueryNotSupported",
                                                                                   "Querying is not supported.") if query else real(query))
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False))["inventories"]["gpu-01"]
    assert "error" not in got, got
    assert got["expand"] is None and got["requests"] == 4 + len(got["entries"])  # the refused request counts
    assert {e["Id"]: e["Version"] for e in got["entries"]} == f.expected("gpu-01")


def test_a_bmc_that_ignores_expand_has_its_members_read_one_by_one(fleet, monkeypatch):
    f = fleet("gpu-01")
    service = f.server.service("gpu-01")
    service.expand_query = BMCWEB_EXPAND
    real = service.firmware_inventory
    monkeypatch.setattr(service, "firmware_inventory", lambda query: real(""))  # answers links whatever was asked
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False))["inventories"]["gpu-01"]
    assert got["requests"] == 3 + len(got["entries"])
    assert {e["Id"]: e["Version"] for e in got["entries"]} == f.expected("gpu-01")


def test_an_expanded_member_that_names_another_host_is_refused(fleet, monkeypatch):
    f = fleet("gpu-01")
    f.server.service("gpu-01").expand_query = BMCWEB_EXPAND
    real = inventory._Reader.get

    def get(self, path):
        doc = real(self, path)
        if "/FirmwareInventory?" in path:
            doc["Members"][0]["@odata.id"] = "https://evil.example/x"
        return doc

    monkeypatch.setattr(inventory._Reader, "get", get)
    got = inventory.run(params([f.bmc("gpu-01")], validate_certs=False))["inventories"]["gpu-01"]
    assert "Members[0] is 'https://evil.example/x', not a path on this BMC" in got["error"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"timeout": -1}, "timeout is -1: give 1 to 600"),
        ({"timeout": 30, "total_timeout": 10}, "total_timeout (10 s) is shorter than timeout (30 s)"),
        ({"workers": 0}, "workers is 0: give 1 to 256"),
        ({"bmcs": [{"name": "gpu-01\n"}]}, "bmcs[0].name 'gpu-01\\n' has leading or trailing white space"),
        ({"bmcs": [{}, {}]}, "bmcs[1].name 'gpu-01' is given twice"),
        ({"bmcs": [{"address": "https://10.0.0.1"}]}, "bmcs[0].address (gpu-01) is 'https://10.0.0.1': give the BMC's host name or IP address only"),
        ({"bmcs": [{"address": "10.0.0.1:8443"}]}, "give the port as bmcs[].port, not in the address"),
        ({"bmcs": [{"port": 0}]}, "bmcs[0].port (gpu-01) is 0: give 1 to 65535"),
        ({"bmcs": [{"password": ""}]}, "bmcs[0].password (gpu-01) is empty"),
        ({"bmcs": [{"user": " "}]}, "bmcs[0].user (gpu-01) is empty"),
        ({"ca_path": "/nonexistent/ca.pem"}, "ca_path '/nonexistent/ca.pem' could not be read as a CA bundle"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_read(change, message):
    base = {"name": "gpu-01", "address": "10.0.0.1", "port": 443, "user": USER, "password": PASSWORD}
    change = dict(change)
    bmcs = [dict(base, **entry) for entry in change.pop("bmcs", [{}])]
    with pytest.raises(inventory.BmcParamError) as caught:
        inventory.run(params(bmcs, **change))
    assert message in caught.value.msg


def test_an_ipv6_address_is_taken():
    assert inventory.check_params(params([{"name": "n", "address": "fd00::5", "port": 443, "user": "u", "password": "p"}]))


def run_module_file(tmp_path, args):
    """The module file as Ansible starts it; returns its JSON result."""
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {"PYTHONPATH": str(ROOT / ".collections"), "PATH": "/usr/bin:/bin", "LC_ALL": "C", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "plugins/modules/bmc_inventory.py"), str(argsfile)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert PASSWORD not in proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_the_module_as_ansible_runs_it_masks_the_password(fleet, tmp_path):
    if not (ROOT / ".collections" / "ansible_collections" / "gpufleet" / "lifecycle").exists():
        pytest.skip("the collection is not linked under .collections (make venv links it)")
    f = fleet("gpu-01")
    result = run_module_file(tmp_path, {"bmcs": [f.bmc("gpu-01")], "ca_path": str(f.cafile), "_ansible_check_mode": True})
    assert result["changed"] is False and "failed" not in result
    assert {e["Id"]: e["Version"] for e in result["inventories"]["gpu-01"]["entries"]} == f.expected("gpu-01")
    assert result["invocation"]["module_args"]["bmcs"][0]["password"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_the_module_as_ansible_runs_it_refuses_bad_input_with_the_field(tmp_path):
    if not (ROOT / ".collections" / "ansible_collections" / "gpufleet" / "lifecycle").exists():
        pytest.skip("the collection is not linked under .collections (make venv links it)")
    result = run_module_file(tmp_path, {"bmcs": [{"name": "gpu-01", "address": "10.0.0.1", "user": USER, "password": PASSWORD}], "timeout": 0})
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == "timeout is 0: give 1 to 600"
    assert result["invocation"]["module_args"]["bmcs"][0]["password"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
