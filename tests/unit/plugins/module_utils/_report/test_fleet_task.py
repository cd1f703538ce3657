"""fleet_report's action plugin on the controller: the same refusals as the module, before anything is written.

The action runs ``fleet_task.run`` with ``ControllerFiles`` in Ansible's worker (plugins/action/fleet_report.py); its
``run`` turns a GpufleetError into the failed result (tests/unit/plugins/action/test_in_process.py runs it whole).
"""

from __future__ import annotations

import os

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpufleet.lifecycle.plugins.action.fleet_report import ActionModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet_task import ARGUMENT_SPEC

BOM = {"driver": {"version": "550.90.07"}, "gpu": {"count": 8, "vbios": "96.00.74.00.0D"}}


def record(name, **facts):
    base = {"driver": {"version": "550.90.07", "installed": True, "loaded": True}, "gpu_count": 8, "gpus": [], "xid": {"critical": []}}
    return {"name": name, "sku": "hgx-h100", "bom": BOM, "facts": dict(base, **facts)}


def run_task(tmp_path, **args):
    """The action's own task, with the arguments checked as the action checks them."""
    validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict({"dest": str(tmp_path / "reports")}, **args))
    assert not validation.error_messages, validation.error_messages
    action = ActionModule.__new__(ActionModule)  # run_task needs nothing of a task or a connection
    return action.run_task(validation.validated_parameters, check_mode=False)


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([record("gpu-001", driver="550.90.07")], "nodes[0] (node gpu-001): facts.driver must be a mapping, not str"),
        ([record("gpu-001", gpus="8")], "nodes[0] (node gpu-001): facts.gpus must be a list, not str"),
        ([record("gpu-001", gpus=[{"vbios_version": 96}, {"vbios_version": "96.00.74.00.0D"}])],
         "nodes[0] (node gpu-001): facts.gpus[0].vbios_version must be a string or null, not int"),
        ([record("gpu-001"), record("gpu-002"), record("gpu-001")], "nodes[2] (node gpu-001): name 'gpu-001' is given twice (also nodes[0])"),
    ],
    ids=["driver-str", "gpus-str", "vbios-int-and-str", "given-twice"],
)
def test_refused_in_the_worker_as_in_the_module_and_nothing_is_written(tmp_path, nodes, message):
    with pytest.raises(GpufleetError) as refused:
        run_task(tmp_path, nodes=nodes)
    assert refused.value.msg.startswith(message), refused.value.msg
    assert not (tmp_path / "reports").exists()


def test_a_directory_where_the_html_goes_writes_no_file_in_the_worker(tmp_path):
    (tmp_path / "reports" / "fleet-report.html").mkdir(parents=True)
    with pytest.raises(GpufleetError, match=r"fleet-report\.html is a directory"):
        run_task(tmp_path, nodes=[record("gpu-001")])
    assert os.listdir(tmp_path / "reports") == ["fleet-report.html"]


def test_a_secret_in_the_title_is_masked_in_the_files_written_in_the_worker(tmp_path):
    password = "pw-in-the-title"  # noqa: S105 - a test value, that the report must not show
    result = run_task(tmp_path, nodes=[record("gpu-001")], title=f"audit {password}", secrets=[password])
    assert result["changed"] is True and result["report"]["title"] == "audit ********"
    for path in result["files"].values():
        assert password not in open(path, encoding="utf-8").read(), path
