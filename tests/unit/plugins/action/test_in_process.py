"""fleet_report and bmc_inventory on the controller: their action plugins run the modules' code in Ansible's worker
(plugins/plugin_utils/_in_process.py), with the same arguments, checks, result and no_log masking as the module, and
run the module itself wherever that would differ (become here). Through ansible-playbook, as users run them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from unittest import mock

import pytest
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.lifecycle.plugins.action import bmc_inventory, fleet_report
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._in_process import without_no_log_values

ROOT = pathlib.Path(__file__).resolve().parents[4]
BIN = pathlib.Path(sys.executable).parent
SECRET = 'pw-"7\\ü'  # noqa: S105 - a test value with characters that JSON escapes
BOM = {"driver": {"version": "550.90.07"}, "gpu": {"count": 8}}


def record(name, driver="550.90.07"):
    return {"name": name, "sku": "hgx-h100", "bom": BOM,
            "facts": {"driver": {"version": driver, "installed": True, "loaded": True}, "gpu_count": 8, "gpus": [], "xid": {"critical": []}}}


NODES = [record("gpu-001"), record("gpu-002", driver="535.161.08"),
         dict(record("gpu-003"), bom=dict(BOM, gpu_firmware={"version": "HGX-B200-24.12-1"}), bmc={"error": f"HTTP Error 401 (user admin, password {SECRET})"})]
REPORT_ARGS = {"nodes": NODES, "expected_hosts": ["gpu-001", "gpu-002", "gpu-003", "gpu-004"], "secrets": [SECRET],
               "title": f"audit {SECRET}", "generated_at": "2026-12-05T00:00:00+00:00"}


def task(name, module, args, **keywords):
    return {"name": name, module: args, "register": "out", "ignore_errors": True, **keywords}


def run_play(tmp_path, tasks):
    """Each task's result on localhost, and the run's whole output."""
    play = [{"name": "On the controller", "hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-vvv",
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable})],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    return [t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]], proc.stdout + proc.stderr


def test_the_report_written_in_process_is_the_modules_and_masks_what_it_masks(tmp_path):
    here, moduled = tmp_path / "here", tmp_path / "module"
    tasks = [task("In process", "gpufleet.lifecycle.fleet_report", dict(REPORT_ARGS, dest=str(here))),
             task("Again", "gpufleet.lifecycle.fleet_report", dict(REPORT_ARGS, dest=str(here))),
             task("Check mode", "gpufleet.lifecycle.fleet_report", dict(REPORT_ARGS, dest=str(tmp_path / "checked")), check_mode=True)]
    if os.geteuid() == 0:  # become (su to root, as root): the action runs the module, as Ansible would without it
        tasks.append(task("As the module", "gpufleet.lifecycle.fleet_report", dict(REPORT_ARGS, dest=str(moduled)),
                          become=True, become_method="su", become_user="root"))
    results, output = run_play(tmp_path, tasks)
    first, again, checked = results[:3]
    assert "invocation" not in first, "the module ran: the report task was meant to run in Ansible's worker"
    assert not first.get("failed") and first["changed"] is True
    assert first["report"]["totals"] == {"nodes": 4, "ok": 1, "drift": 1, "unknown": 1, "error": 0, "unreachable": 1}
    assert first["report"]["title"] == "audit ********"  # a no_log value is masked in the result, as exit_json does
    assert first["files"] == {fmt: str(here / f"fleet-report.{fmt}") for fmt in ("json", "md", "html")}
    assert SECRET not in output and json.dumps(SECRET)[1:-1] not in output
    assert again["changed"] is False
    assert checked["changed"] is True and not (tmp_path / "checked").exists()
    if os.geteuid() == 0:
        module = results[3]
        assert "invocation" in module, "become: the module should have run"
        assert module["report"] == first["report"]
        assert module["files"] == {fmt: str(moduled / f"fleet-report.{fmt}") for fmt in ("json", "md", "html")}
        for fmt in ("json", "md", "html"):
            assert (moduled / f"fleet-report.{fmt}").read_text() == (here / f"fleet-report.{fmt}").read_text()


def test_bad_arguments_fail_as_the_modules_do_and_nothing_is_written(tmp_path):
    dest = str(tmp_path / "reports")
    results, _output = run_play(tmp_path, [
        task("No nodes", "gpufleet.lifecycle.fleet_report", {"dest": dest}),
        task("Unknown option", "gpufleet.lifecycle.fleet_report", {"nodes": [], "dest": dest, "colour": "red"}),
        task("An inventory that is not a dict", "gpufleet.lifecycle.fleet_report",
             {"nodes": NODES[:1], "dest": dest, "bmc_inventories": {"gpu-001": "read"}}),
        task("A bad BOM", "gpufleet.lifecycle.fleet_report", {"nodes": [dict(record("gpu-001"), bom={"driver": ["550.90.07"]})], "dest": dest}),
        task("No BMCs' password", "gpufleet.lifecycle.bmc_inventory", {"bmcs": [{"name": "gpu-001", "address": "127.0.0.1", "user": "admin"}]}),
    ])
    assert all(result.get("failed") for result in results), results
    assert "missing required arguments: nodes" in results[0]["msg"]
    assert "Unsupported parameters for (gpufleet.lifecycle.fleet_report) module: colour" in results[1]["msg"]
    assert results[2]["msg"].startswith("bmc_inventories['gpu-001'] is a str: give bmc_inventory's inventories as registered")
    assert results[3]["msg"].startswith("cannot compare the fleet with its BOM:") and "section 'driver' must be a mapping" in results[3]["msg"]
    assert "missing required arguments: password found in bmcs" in results[4]["msg"]
    assert not (tmp_path / "reports").exists()


def test_a_bmc_read_in_process_is_a_finding_without_its_password(tmp_path):
    with __import__("socket").socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    bmcs = [{"name": "gpu-001", "address": "127.0.0.1", "port": port, "user": "admin", "password": SECRET}]
    results, output = run_play(tmp_path, [task("Read", "gpufleet.lifecycle.bmc_inventory", {"bmcs": bmcs, "timeout": 5})])
    result = results[0]
    assert "invocation" not in result and not result.get("failed"), result
    assert result["summary"]["errors"] == ["gpu-001"] and result["inventories"]["gpu-001"]["error"]
    assert SECRET not in output and json.dumps(SECRET)[1:-1] not in output


@pytest.mark.parametrize(
    ("result", "masked"),
    [
        ({"msg": "fine", "n": 3}, False),
        ({"msg": f"login with {SECRET} refused"}, True),  # inside a string
        ({"items": [{"deep": [SECRET]}]}, True),  # a whole value, nested
        ({"port": 4711}, True),  # a number equal to a no_log value, as remove_values masks it
        ({"raw": b"bytes"}, False),  # not JSON: remove_values, which leaves it as it is
    ],
    ids=["clean", "in-a-string", "nested", "number", "not-json"],
)
def test_no_log_values_are_masked_as_remove_values_masks_them(result, masked):
    from ansible.module_utils.common.parameters import remove_values

    no_log = {SECRET, "4711"}
    out = without_no_log_values(result, no_log)
    assert out == remove_values(result, no_log)
    assert (out != result) is masked
    assert without_no_log_values(result, set()) is result


def run_in_process(action_class, args):
    """The action's result for ``args`` in this process (the local connection, no become), ActionBase.run stubbed."""
    task = mock.Mock(args=args, check_mode=False, async_val=0)
    action = action_class(task=task, connection=mock.Mock(transport="local"), play_context=mock.Mock(become=False),
                          loader=None, templar=None, shared_loader_obj=None)
    with mock.patch.object(ActionBase, "run", return_value={}), \
            mock.patch("ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._in_process.controller_selinux_enabled", return_value=False):
        return action.run(task_vars={})


def bmc(**extra):
    return dict({"name": "gpu-001", "address": "10.0.0.1", "user": "admin", "password": SECRET}, **extra)


@pytest.mark.parametrize(
    ("action", "args", "msg"),
    [
        # A password given as a port: the error quotes it as repr writes it.
        (bmc_inventory.ActionModule, {"bmcs": [bmc(port=SECRET)]},
         "argument 'port' is of type str found in 'bmcs'. and we were unable to convert to int: \"'********'\" cannot be converted to an int"),
        # A password given where a boolean goes: quoted as it is.
        (bmc_inventory.ActionModule, {"bmcs": [bmc()], "validate_certs": SECRET},
         "argument 'validate_certs' is of type str and we were unable to convert to bool: The value '********' is not a valid boolean."),
        # A secret given as a format.
        (fleet_report.ActionModule, {"nodes": [], "dest": "/nonexistent/r", "secrets": [SECRET], "formats": ["md", SECRET]},
         "value of formats must be one or more of: json, md, html. Got no match for: ********"),
        # Host names, addresses and users (bmcs is no_log as a whole) are not masked.
        (bmc_inventory.ActionModule, {"bmcs": [bmc(colour="gpu-001")]},
         "Unsupported parameters for (gpufleet.lifecycle.bmc_inventory) module: bmcs.colour. Supported parameters include: address, name, password"),
    ],
    ids=["password-as-port", "password-as-bool", "secret-as-format", "names-unmasked"],
)
def test_an_argument_error_in_process_masks_the_secrets_it_quotes(action, args, msg):
    result = run_in_process(action, args)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith(msg), result["msg"]
    for form in (SECRET, repr(SECRET)[1:-1], json.dumps(SECRET)[1:-1]):
        assert form not in json.dumps(result) and form not in result["msg"]
