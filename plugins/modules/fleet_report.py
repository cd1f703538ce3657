#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_report
short_description: Write the GPU fleet report (JSON, Markdown, HTML) from per-node facts and BOMs
version_added: 0.1.0
description:
  - Compares each node's C(gpufleet.lifecycle.gpu_facts) with the bill of materials (BOM) of its SKU and writes a fleet report
    that lists, per node and per component, what is installed, what the BOM wants, and the drift.
  - Calls out mixed VBIOS within a node, and components whose versions differ between nodes of the same SKU.
  - Nodes that were expected but sent no facts are listed as unreachable.
  - Drift is exact equality with the BOM; a newer version than the BOM is drift too.
  - Firmware is compared in band (VBIOS, GSP firmware, InfoROM from C(nvidia-smi -q -x)) and out of band (the HGX bundle, NVSwitch,
    BMC and BIOS firmware from the BMC's Redfish firmware inventory, O(nodes[].bmc)). A component that nothing could read is
    V(unknown) with the reason, never V(ok).
  - "Run it on the controller: C(delegate_to: localhost) and C(run_once: true)."
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.report
options:
  nodes:
    description:
      - One entry per node that answered.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Inventory name of the node.
        type: str
        required: true
      sku:
        description: Hardware SKU of the node (the group its BOM comes from).
        type: str
      bom:
        description: The node's bill of materials (C(gpufleet_bom)).
        type: dict
        default: {}
      facts:
        description: The node's C(ansible_facts.gpufleet).
        type: dict
        default: {}
      error:
        description: Why the node's facts could not be gathered; the node is reported with status V(error) and this message.
        type: str
      bmc:
        description:
          - What the node's BMC firmware inventory gave, read out of band with M(gpufleet.lifecycle.bmc_inventory) (one entry of its
            RV(gpufleet.lifecycle.bmc_inventory#module:inventories)) or C(community.general.redfish_info) (category V(Update), command
            V(GetFirmwareInventory)).
          - "C(entries): the members (each with C(Id) and C(Version)), or C(error): why it could not be read."
          - When not given, the node's entry in O(bmc_inventories), if any.
          - Omit it (or V(null)) when no BMC credentials are set for the node; the BOM's C(gpu_firmware), C(nvswitch_firmware),
            C(bmc_firmware) and C(bios) are then reported V(unknown) with that reason, never V(ok).
        type: dict
      nvlink_domain:
        description:
          - The inventory's C(nvlink_domain) of a GB200/GB300 NVL72 compute tray, cross-checked with the ClusterUUID its GPUs
            report (a tray whose inventory domain differs from its domain mates' is reported).
        type: str
        version_added: 0.2.0
  bmc_inventories:
    description:
      - The RV(gpufleet.lifecycle.bmc_inventory#module:inventories) of one M(gpufleet.lifecycle.bmc_inventory) call for the whole
        fleet, keyed by node name - the O(nodes[].bmc) of every node that has none of its own.
    type: dict
    default: {}
    version_added: 0.2.0
  expected_hosts:
    description: Every node the audit targeted; those missing from O(nodes) are reported as unreachable.
    type: list
    elements: str
    default: []
  basename:
    description: File name of the reports without extension.
    type: str
    default: fleet-report
  formats:
    description: Formats to write.
    type: list
    elements: str
    choices: [json, md, html]
    default: [json, md, html]
  title:
    description: Title of the report.
    type: str
    default: GPU fleet audit
  secrets:
    description:
      - Strings that must never appear in the report (the BMC passwords); each is replaced by V(********) wherever a node's
        record holds it, for example in a BMC's error message.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
# As playbooks/audit.yml does: gpu_facts registered on every node, the BMCs read in one task, one report.
- name: Gather GPU facts
  gpufleet.lifecycle.gpu_facts:
  register: gpufleet_audit_gathered
  failed_when: false

- name: Read every BMC's firmware inventory
  gpufleet.lifecycle.bmc_inventory:
    bmcs: "{{ ansible_play_hosts | map('extract', hostvars) | gpufleet.lifecycle.bmc_endpoints }}"
  delegate_to: localhost
  run_once: true
  register: bmc

- name: Write the fleet report
  gpufleet.lifecycle.fleet_report:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars) | gpufleet.lifecycle.audit_records }}"
    bmc_inventories: "{{ bmc.inventories }}"
    expected_hosts: "{{ groups['gpu_nodes'] }}"
    dest: reports/
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
report:
  description: The report (what the JSON file holds).
  returned: always
  type: dict
  contains:
    totals:
      description: Node counts by status.
      type: dict
      returned: always
      sample: {nodes: 16, ok: 11, drift: 3, unknown: 0, error: 1, unreachable: 1}
    nodes:
      description:
        - Per node, its status and every compared component with installed and wanted versions.
        - C(hardware) is what the audit read of the node whatever its BOM names (kernel, driver, GPUs with their VBIOS,
          NVSwitch, fabric manager, ConnectX ports with PSID, part number and firmware, and the BMC's firmware
          inventory as member id to version, or V(null) when it was not read); V(null) for a node that could not be read.
        - C(bom) only on a node whose BOM differs from its SKU's in RV(report.boms).
      type: list
      elements: dict
      returned: always
      sample:
        - name: gpu-a-001
          sku: hgx-h100
          status: drift
          gpu_firmware: HGX-22.10-1
          bmc_inventory: read
          items:
            - {component: driver, installed: 535.161.08, wanted: 550.90.07, status: drift}
            - {component: gpu_firmware, installed: HGX-22.10-1, wanted: HGX-22.10-1, status: ok, source: bmc, inventory_ids: [HGX_FW_BMC_0]}
    unreachable:
      description: Expected nodes without facts.
      type: list
      elements: str
      returned: always
      sample: [gpu-a-007]
    mixed_within_sku:
      description: Per SKU, components with more than one installed version, and the nodes on each.
      type: dict
      returned: always
      sample: {hgx-h100: {gpu_vbios: {96.00.74.00.0D: [gpu-a-001], 96.00.89.00.01: [gpu-a-002]}}}
    boms:
      description: Per SKU, the BOM its nodes were compared with.
      type: dict
      returned: always
      sample: {hgx-h100: {driver: {version: 550.90.07, kernel_module: open}, nic_firmware: {MT_0000000838: 28.43.1014}}}
files:
  description: Paths of the report files, by format.
  returned: always
  type: dict
  sample: {json: reports/fleet-report.json, md: reports/fleet-report.md, html: reports/fleet-report.html}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet_task import ARGUMENT_SPEC, run


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module.params, module)
    except GpufleetError as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
