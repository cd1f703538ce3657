"""The gpu_firmware role trusts neither a node's state file nor an unverified BMC (ansible-playbook on the controller).

- rollback: the node state file gives only the version to go back to; the package comes from gpu_firmware_packages, and
  a version missing there is refused before anything runs.
- plan (and every nvfwupd call): nvfwupd checks no certificate, so the role reads the BMC first with the collection's
  own verified client; a certificate the CA does not verify stops the role before nvfwupd gets the password.
- every Redfish task of every role takes validate_certs and ca_path from the inventory, never a literal false.
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ipaddress
import json
import os
import pathlib
import ssl
import subprocess
import sys
import threading

import pytest
import yaml
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
NODE_PATH = "/srv/firmware/hgx-21.01-0-vulnerable.fwpkg"
PASSWORD = "s3cret-Bmc-pw"  # noqa: S105 - a test BMC's password, looked for in the output

PLAYBOOK = """
- name: A gpu_firmware entry point on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.gpu_firmware
        tasks_from: "{{ entry }}"
"""


def play(tmp_path, entry, extra):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extra = {"entry": entry, "ansible_python_interpreter": sys.executable, "gpu_firmware_async": False, **extra}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    doc = json.loads(proc.stdout)
    tasks = [(t["task"]["name"].split(" : ", 1)[-1], t["hosts"].get("localhost", {})) for t in doc["plays"][0]["tasks"]]
    return proc, tasks


def failed_task(tasks):
    failed = [(name, result) for name, result in tasks if result.get("failed")]
    assert len(failed) == 1, tasks
    return failed[0]


# --- rollback: the version from the node, the file from the controller ---------------------------------------------

def node_state_file(tmp_path, previous):
    """What root on the node may have written: the versions, and package paths of its own choosing."""
    doc = _state.empty()
    _state.record_last_known_good(doc, "gpu_firmware", previous, {"package": NODE_PATH, "checksum": "sha256:" + "c" * 64})
    _state.record_last_known_good(doc, "gpu_firmware", "HGX-24.04-2", {
        "package": NODE_PATH, "checksum": "sha256:" + "c" * 64,
        "previous": {"version": previous, "package": NODE_PATH, "checksum": "sha256:" + "c" * 64}})
    _state.append_history(doc, "gpu_firmware", "update", before=previous, after="HGX-24.04-2", result="ok")
    path = tmp_path / "gpufleet.fact"
    path.write_text(json.dumps(doc))
    return path


def rollback_vars(state_file, controller_package):
    return {
        "gpu_firmware_state_file": str(state_file),
        "gpu_firmware_packages": {"HGX-22.10-1": {"package": str(controller_package), "checksum": "sha256:" + "a" * 64}},
        "gpu_firmware_bmc_address": "127.0.0.1", "gpu_firmware_bmc_user": "admin", "gpu_firmware_bmc_password": PASSWORD,
        "gpu_firmware_bmc_validate_certs": False,  # this test is about the package: no BMC is reached
        "gpu_firmware_activate": False,
    }


def test_rollback_flashes_the_controllers_package_for_the_nodes_version(tmp_path):
    controller_package = tmp_path / "controller" / "hgx-22.10-1.fwpkg"
    state_file = node_state_file(tmp_path, "HGX-22.10-1")
    _proc, tasks = play(tmp_path, "rollback", rollback_vars(state_file, controller_package))
    # nvfwupd was handed the controller's package (and stopped there: the file is absent, its sha256 is checked first)
    name, flash = failed_task(tasks)
    assert name == "Bring the firmware to the package (nvfwupd through the BMC)"
    assert (flash["invocation"]["module_args"]["package"], flash["invocation"]["module_args"]["checksum"]) == (
        str(controller_package), "sha256:" + "a" * 64)
    assert flash["invocation"]["module_args"]["allow_downgrade"] is True


def test_rollback_refuses_a_version_the_controller_lacks(tmp_path):
    state_file = node_state_file(tmp_path, "HGX-21.01-0")
    before = state_file.read_bytes()
    proc, tasks = play(tmp_path, "rollback", rollback_vars(state_file, tmp_path / "hgx-22.10-1.fwpkg"))
    assert proc.returncode != 0
    name, result = failed_task(tasks)
    assert name == "Check that there is a package to roll back to"
    assert "HGX-21.01-0" in result["msg"] and "add 'HGX-21.01-0'" in result["msg"] and "gpu_firmware_packages" in result["msg"]
    assert result["msg"].endswith("Nothing was changed")
    assert not any(name.startswith("Bring the firmware") for name, _result in tasks)
    assert state_file.read_bytes() == before


# --- the BMC's certificate before nvfwupd --------------------------------------------------------------------------

def make_ca(folder, common_name):
    """A self-signed CA certificate for 127.0.0.1 (as the simulator's) and its key, written to folder."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem"


REDFISH = {
    "/redfish/v1/": {"UpdateService": {"@odata.id": "/redfish/v1/UpdateService"}},
    "/redfish/v1/UpdateService": {"FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"}},
    "/redfish/v1/UpdateService/FirmwareInventory": {"Members": []},
}


class _Redfish(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        doc = REDFISH.get(self.path.split("?", 1)[0])
        body = json.dumps(doc or {}).encode()
        self.send_response(200 if doc is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def bmc(tmp_path):
    """A minimal Redfish service over TLS on 127.0.0.1 with the certificate of its own CA; yields (port, its CA)."""
    certfile, keyfile = make_ca(tmp_path / "bmc", "test BMC")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redfish)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], certfile
    finally:
        server.shutdown()
        server.server_close()


def plan_vars(tmp_path, port, ca_path):
    package = tmp_path / "hgx.fwpkg"
    package.write_bytes(b"not a real package")
    return {
        "gpu_firmware_package": str(package), "gpu_firmware_checksum": "sha256:" + hashlib.sha256(package.read_bytes()).hexdigest(),
        "gpu_firmware_bmc_address": "127.0.0.1", "gpu_firmware_bmc_port": port, "gpu_firmware_bmc_user": "admin",
        "gpu_firmware_bmc_password": PASSWORD, "gpu_firmware_bmc_ca_path": str(ca_path),
        "gpu_firmware_nvfwupd_path": str(tmp_path / "no-nvfwupd-here"),
        "gpu_firmware_state_file": str(tmp_path / "gpufleet.fact"),
    }


NVFWUPD_TASK = "Read the firmware and plan the package (check mode)"


def test_a_certificate_the_ca_does_not_verify_stops_the_role_before_nvfwupd(tmp_path, bmc):
    port, _right_ca = bmc
    wrong_ca, _key = make_ca(tmp_path / "other", "another CA")
    proc, tasks = play(tmp_path, "plan", plan_vars(tmp_path, port, wrong_ca))
    assert proc.returncode != 0
    name, result = failed_task(tasks)
    assert name == "Refuse a BMC whose certificate could not be verified (nvfwupd was not run)"
    assert "certificate could not be verified" in result["msg"] and "nothing was run" in result["msg"]
    assert "gpufleet_bmc_ca_path" in result["msg"]
    assert NVFWUPD_TASK not in dict(tasks)
    assert PASSWORD not in proc.stdout + proc.stderr


def test_a_verified_certificate_lets_nvfwupd_run(tmp_path, bmc):
    port, right_ca = bmc
    proc, tasks = play(tmp_path, "plan", plan_vars(tmp_path, port, right_ca))
    results = dict(tasks)
    assert "error" not in results["Check the BMC's certificate before nvfwupd gets the password"]["inventories"]["localhost"]
    # the role reached nvfwupd (which is not installed here: that is where it stops)
    name, result = failed_task(tasks)
    assert name == NVFWUPD_TASK and "nvfwupd_path" in result["msg"], result
    # the module checks the certificate itself too (nvfwupd does not), with the role's CA
    bmc = result["invocation"]["module_args"]["bmc"]
    assert (bmc["validate_certs"], bmc["ca_path"]) == (True, str(right_ca))
    assert PASSWORD not in proc.stdout + proc.stderr


# --- every Redfish task checks the certificate ---------------------------------------------------------------------

def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key) or [])


REDFISH_TASKS = sorted(
    (str(path.relative_to(ROOT)), task["name"], module, task[module])
    for path in (ROOT / "roles").glob("*/*/*.yml") if path.parent.name in ("tasks", "handlers")
    for task in _tasks(yaml.safe_load(path.read_text()) or [])
    for module in task if module.startswith("community.general.redfish_")
)


def test_the_roles_call_redfish():
    assert len(REDFISH_TASKS) >= 10


@pytest.mark.parametrize(("path", "name", "module", "args"), REDFISH_TASKS, ids=[f"{p}:{n}" for p, n, _m, _a in REDFISH_TASKS])
def test_every_redfish_call_checks_the_bmcs_certificate(path, name, module, args):
    """validate_certs from the inventory (gpufleet_bmc_validate_certs through the role's variable) and the fleet's CA."""
    assert isinstance(args.get("validate_certs"), str) and "_bmc_validate_certs" in args["validate_certs"], (path, name)
    assert "_bmc_ca_path" in str(args.get("ca_path")), (path, name)
