# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet_report task, whoever runs it (private).

The module ``fleet_report`` runs it on its host; its action plugin runs it in the controller's own worker when the task
runs on the controller (playbooks/audit.yml's second play), so that the fleet's records are not written out as JSON to
a new Python process and read back with the report. Both take the same arguments and return the same result.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import BomError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.files import write_reports
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import RENDERERS, build_report

ARGUMENT_SPEC = dict(
    nodes=dict(
        type="list",
        elements="dict",
        required=True,
        options=dict(
            name=dict(type="str", required=True),
            sku=dict(type="str"),
            bom=dict(type="dict", default={}),
            facts=dict(type="dict", default={}),
            error=dict(type="str"),
            bmc=dict(type="dict"),
            nvlink_domain=dict(type="str"),
        ),
    ),
    secrets=dict(type="list", elements="str", default=[], no_log=True),
    bmc_inventories=dict(type="dict", default={}),
    expected_hosts=dict(type="list", elements="str", default=[]),
    dest=dict(type="path", required=True),
    basename=dict(type="str", default="fleet-report"),
    formats=dict(type="list", elements="str", choices=list(RENDERERS), default=list(RENDERERS)),
    title=dict(type="str", default="GPU fleet audit"),
    generated_at=dict(type="str"),
)


def run(params, files):
    """``{"changed", "report", "files"}`` for validated ``params``; ``files`` is what writes them (an AnsibleModule, or
    ``files.ControllerFiles`` in an action plugin). GpufleetError for a refusal (a record the report cannot read, a node
    given twice, a bad BOM, a directory where a report goes): nothing is written then."""
    inventories = params["bmc_inventories"]
    for name, value in inventories.items():
        if not isinstance(value, dict):
            raise GpufleetError(f"bmc_inventories[{name!r}] is a {type(value).__name__}: give bmc_inventory's inventories as registered (a dict per node)")
        for key, kind in (("entries", list), ("error", str)):
            if value.get(key) is not None and not isinstance(value[key], kind):
                raise GpufleetError(
                    f"bmc_inventories[{name!r}].{key} is a {type(value[key]).__name__}, not a {kind.__name__}: give bmc_inventory's inventories as registered"
                )
    nodes = [node if node.get("bmc") is not None or node["name"] not in inventories else dict(node, bmc=inventories[node["name"]])
             for node in params["nodes"]]
    try:
        report = build_report(
            nodes, params["expected_hosts"], title=params["title"], generated_at=params["generated_at"], secrets=params["secrets"]
        )
    except BomError as exc:
        raise GpufleetError(f"cannot compare the fleet with its BOM: {exc}. Fix gpufleet_bom in the SKU's group_vars.") from exc
    # Every file is rendered, and every target read, before the first write: a refusal writes nothing.
    outputs = {fmt: (fmt, RENDERERS[fmt](report)) for fmt in params["formats"]}
    changed, paths = write_reports(files, params["dest"], params["basename"], outputs, last="json")
    return {"changed": changed, "report": report, "files": paths}
