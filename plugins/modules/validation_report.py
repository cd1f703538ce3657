#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_report
short_description: Write the fleet validation report (JSON, Markdown, HTML, JUnit XML) from per-node gpu_validate results
version_added: 0.1.0
description:
  - Collects the C(gpufleet.lifecycle.gpu_validate) result of every node and writes a fleet report that lists, per node, its verdict,
    the failed and warning checks with observed and expected values, its measurements, and whether it is a straggler.
  - The JUnit XML form has one test suite per node and one test case per check, for CI systems.
  - Nodes that were expected but sent no result are listed as unreachable.
  - Run it on the controller, with C(delegate_to=localhost) and C(run_once=true).
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.report
options:
  nodes:
    description: One entry per node that ran gpu_validate.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Inventory name of the node.
        type: str
        required: true
      result:
        description: The node's registered C(gpufleet.lifecycle.gpu_validate) result (failed or not).
        type: dict
        default: {}
  stragglers:
    description: The nodes flagged by the C(gpufleet.lifecycle.stragglers) filter in the same run.
    type: list
    elements: dict
    default: []
  expected_hosts:
    description: Every node the validation targeted; those missing from O(nodes) are reported as unreachable.
    type: list
    elements: str
    default: []
  basename:
    description: File name of the reports without extension.
    type: str
    default: validation-report
  formats:
    description: Formats to write; V(junit) is written as C(<basename>.junit.xml).
    type: list
    elements: str
    choices: [json, md, html, junit]
    default: [json, md, html, junit]
  title:
    description: Title of the report.
    type: str
    default: GPU fleet validation
seealso:
  - module: gpufleet.lifecycle.gpu_validate
"""

EXAMPLES = r"""
- name: Validate each node
  gpufleet.lifecycle.gpu_validate:
    level: standard
  register: validation

- name: Keep each node's entry for the report
  ansible.builtin.set_fact:
    validation_entry:
      name: "{{ inventory_hostname }}"
      result: "{{ validation }}"

- name: Write the validation report
  gpufleet.lifecycle.validation_report:
    nodes: "{{ ansible_play_hosts_all | map('extract', hostvars) | selectattr('validation_entry', 'defined')
               | map(attribute='validation_entry') | list }}"
    expected_hosts: "{{ ansible_play_hosts_all }}"
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
      description: Node counts by status, unreachable nodes and stragglers.
      type: dict
      returned: always
      sample: {nodes: 16, pass: 13, warn: 1, fail: 1, unreachable: 1, stragglers: 1}
    nodes:
      description: Per node, its status, level, failed checks, every check, measurements and straggler flags.
      type: list
      elements: dict
      returned: always
      sample: [{name: gpu-a-001, status: fail, level: full, failed_checks: [nccl_busbw], stragglers: []}]
    unreachable:
      description: Expected nodes without a result.
      type: list
      elements: str
      returned: always
      sample: [gpu-a-007]
    stragglers:
      description: The straggler flags given in O(stragglers).
      type: list
      elements: dict
      returned: always
      sample: [{name: gpu-a-003, metric: gflops_min, value: 22675.0, median: 41230.0, deficit_pct: 45.0, tolerance_pct: 10.0}]
files:
  description: Paths of the report files, by format.
  returned: always
  type: dict
  sample: {json: reports/validation-report.json, md: reports/validation-report.md, html: reports/validation-report.html,
           junit: reports/validation-report.junit.xml}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.files import ReportFileError, write_reports
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.validation import EXTENSIONS, RENDERERS, RecordError, build_report


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(
                type="list",
                elements="dict",
                required=True,
                options=dict(name=dict(type="str", required=True), result=dict(type="dict", default={})),
            ),
            stragglers=dict(type="list", elements="dict", default=[]),
            expected_hosts=dict(type="list", elements="str", default=[]),
            dest=dict(type="path", required=True),
            basename=dict(type="str", default="validation-report"),
            formats=dict(type="list", elements="str", choices=list(RENDERERS), default=list(RENDERERS)),
            title=dict(type="str", default="GPU fleet validation"),
            generated_at=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        report = build_report(params["nodes"], params["expected_hosts"], params["stragglers"], title=params["title"], generated_at=params["generated_at"])
        # Every file is rendered, and every target read, before the first write: a refusal writes nothing.
        outputs = {fmt: (EXTENSIONS[fmt], RENDERERS[fmt](report)) for fmt in params["formats"]}
        changed, files = write_reports(module, params["dest"], params["basename"], outputs, last="json")
    except (RecordError, ReportFileError) as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(changed=changed, report=report, files=files)


if __name__ == "__main__":
    main()
