#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_report
short_description: Write the evidence of a rollout (per-node JSON, Markdown, HTML with a timeline chart, JUnit XML)
version_added: 0.2.0
description:
  - Writes what a rollout did, node by node, from the per-node records the rollout keeps (phases with their times, checks,
    versions before and after, who or what decided a rollback) and the wave plan of the C(gpufleet.lifecycle.wave_plan) filter.
  - "Files in O(dest): C(nodes/<node>.json) (one per record), C(rollout-report.json), C(rollout-report.md), C(rollout-report.html)
    and C(rollout-junit.xml)."
  - The HTML report holds an inline SVG timeline chart (no script, no external asset) with one row per node grouped by wave, canary
    first, a bar per phase coloured by phase, failed phases outlined in red over hatching, a red diamond where a node's failure was
    decided, and each wave's start as a dashed line. The chart scrolls for large fleets.
  - The JUnit XML file has one test suite per wave and one test case per node (time is the node's duration); a rolled back or
    failed node is a failure with the reason, a skipped or not started node is skipped.
  - Every record is validated before anything is written (keys, types, phase names, statuses, times); a bad record fails naming the
    node and the field, and nothing is written.
  - URLs that carry credentials (C(user:password@), a signature or token in the query) are redacted wherever the records hold them,
    and every string of O(secrets) is replaced by V(********). The same are masked in what the task returns (its invocation included).
  - The module's C(Invoked with) line in syslog or the journal shows V(NOT_LOGGING_PARAMETER) for every option but O(formats), as any
    of them may hold a credential and that line is written before the module can look for one.
  - A planned node without a record is reported as V(not_started).
  - "Run it on the controller: C(delegate_to: localhost) and C(run_once: true)."
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.report
options:
  rollout_id:
    description: The rollout's id; every record must carry the same one.
    type: str
    required: true
  records:
    description:
      - One record per node, as the rollout keeps it (see C(docs/rollout_report.md) for every field).
      - "Keys: C(node) and C(rollout_id) and C(result) (required); C(wave) (V(0) for the canary, V(1), V(2)... or V(null));
        C(domain), C(before), C(after), C(phases), C(checks), C(rollback), C(drain), C(skip_reason)."
      - "C(result) is one of V(upgraded), V(unchanged), V(rolled_back), V(failed_drained), V(skipped), V(not_started)."
      - "Each phase has C(name) (V(preflight), V(admission), V(drain), V(nic_firmware), V(gpu_firmware), V(driver), V(activate),
        V(validate), V(resume), V(soak), V(rollback)), C(start) and C(end) (epoch seconds; C(end) may be V(null) only while the
        phase is V(started)), C(status) (V(started), V(ok), V(failed), V(skipped)) and C(detail)."
    type: list
    elements: dict
    required: true
  plan:
    description: The C(gpufleet.lifecycle.wave_plan) result, to report the waves as planned beside what was done.
    type: dict
    default: {}
  summary_extra:
    description:
      - Facts about the run shown in the summary.
      - "Known keys: C(who) (str), C(failure_budget) (int, or its digits), C(max_unavailable) (int or V(10%)), C(stop_file) (path),
        C(stop_file_present) (bool, or V(true)/V(false)/V(yes)/V(no)), C(stopped_reason) (str), C(controller) (str).
        Other keys with plain values are shown as given."
    type: dict
    default: {}
  formats:
    description: Formats to write. The per-node JSON files are written with V(json).
    type: list
    elements: str
    choices: [json, markdown, html, junit]
    default: [json, markdown, html, junit]
  title:
    description: Title of the report.
    type: str
    default: GPU fleet rollout
  secrets:
    description: Strings that must never appear in the report (BMC passwords, tokens); each is replaced by V(********).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Write the rollout's evidence
  gpufleet.lifecycle.rollout_report:
    dest: "{{ gpufleet_report_dir }}"
    rollout_id: "{{ gpufleet_rollout_id }}"
    records: "{{ ansible_play_hosts_all | map('extract', hostvars) | selectattr('gpufleet_rollout_record', 'defined')
                 | map(attribute='gpufleet_rollout_record') | list }}"
    plan: "{{ gpufleet_wave_plan }}"
    summary_extra:
      who: "{{ lookup('ansible.builtin.env', 'USER') }}@{{ lookup('ansible.builtin.pipe', 'hostname') }}"
      failure_budget: "{{ gpufleet_failure_budget }}"
      max_unavailable: "{{ gpufleet_max_unavailable }}"
      stop_file: "{{ gpufleet_stop_file }}"
      stop_file_present: "{{ gpufleet_stop_file is exists }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
paths:
  description: Paths of the files written (or that would be, in check mode), by format; C(nodes) maps each node to its JSON file.
  returned: always
  type: dict
  sample:
    json: reports/rollout-r-1/rollout-report.json
    markdown: reports/rollout-r-1/rollout-report.md
    html: reports/rollout-r-1/rollout-report.html
    junit: reports/rollout-r-1/rollout-junit.xml
    nodes: {gpu-01: reports/rollout-r-1/nodes/gpu-01.json}
headline:
  description: The report's first line, the nodes counted by result.
  returned: always
  type: str
  sample: "24 nodes: 22 upgraded, 1 rolled back, 1 skipped."
  version_added: 0.2.0
summary:
  description: Counts of nodes per result, and the summary the report shows.
  returned: always
  type: dict
  sample:
    rollout_id: r-1
    nodes: 24
    upgraded: 22
    unchanged: 0
    rolled_back: 1
    failed_drained: 0
    skipped: 1
    not_started: 0
    failed: 1
    failure_budget: 2
    failure_budget_exceeded: false
    started: "2026-12-01T10:00:00Z"
    ended: "2026-12-01T11:12:40Z"
    duration_s: 4360.0
    waves_planned: 4
    waves_done: 4
    redactions: 0
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.files import ReportFileError, ensure_folder, write_reports
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout import FILES, RENDERERS, RecordError, build_report, headline, node_evidence
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import settle_no_log_values


class _Module(AnsibleModule):
    """AnsibleModule that masks with the secrets and the credentials only (settle_no_log_values) from the first line it
    logs or failure it returns, those of its own argument checks included: not with every host name, time and word
    ("ok") the no_log options registered. They starred the "Invoked with" line ("Inv********ed"), and a refused
    argument took one pass over the whole invocation per value (2,500 records: 12 s; 10,000: over 5 min)."""

    settled = False

    def settle(self):
        if not self.settled and hasattr(self, "params"):  # a failure before the arguments are read has nothing to mask
            settle_no_log_values(self.no_log_values, self.params)
            self.settled = True

    def log(self, msg, log_args=None):
        self.settle()
        super().log(msg, log_args=log_args)

    def fail_json(self, msg, **kwargs):
        self.settle()
        super().fail_json(msg, **kwargs)


def main():
    # Every option that can hold free text is no_log, so that the syslog/journal "Invoked with" line shows none of it
    # (rollout_records.NOT_LOGGED); settle_no_log_values then leaves only the secrets and credentials masked.
    argument_spec = dict(
        dest=dict(type="path", required=True, no_log=True),
        rollout_id=dict(type="str", required=True, no_log=True),
        records=dict(type="list", elements="dict", required=True, no_log=True),
        plan=dict(type="dict", default={}, no_log=True),
        summary_extra=dict(type="dict", default={}, no_log=True),
        formats=dict(type="list", elements="str", choices=list(RENDERERS), default=list(RENDERERS)),
        title=dict(type="str", default="GPU fleet rollout", no_log=True),
        secrets=dict(type="list", elements="str", default=[], no_log=True),
        generated_at=dict(type="str", no_log=True),
    )
    module = _Module(argument_spec=argument_spec, supports_check_mode=True)
    # Masked from here on: the secrets and the credentials found in any option (the report removes them from its files).
    module.settle()
    params = module.params
    try:
        report = build_report(
            params["records"], params["rollout_id"], plan=params["plan"], summary_extra=params["summary_extra"], title=params["title"],
            generated_at=params["generated_at"], secrets=params["secrets"],
        )
    except RecordError as exc:
        module.fail_json(**exc.fail_kwargs())
    if report["summary"]["redactions"]:
        module.warn(
            "{} credentials (URLs with user:password@ or a token, or given secrets) were found in the rollout records and removed from the "
            "report: find what put them there".format(report["summary"]["redactions"])
        )

    dest = params["dest"]
    changed = False
    paths = {}
    try:
        # Every file is rendered before the first is written: a renderer's failure writes nothing.
        rendered = {fmt: RENDERERS[fmt](report) for fmt in params["formats"]}
        evidence = node_evidence(report) if "json" in params["formats"] else {}
        ensure_folder(module, dest)
        if evidence:
            paths["nodes"] = {}
            nodes_dir = os.path.join(dest, "nodes")
            ensure_folder(module, nodes_dir, follow_link=False)
            for node, text in evidence.items():
                node_changed, files = write_reports(module, nodes_dir, node, {"json": ("json", text)})
                changed |= node_changed
                paths["nodes"][node] = files["json"]
        for fmt, content in rendered.items():
            basename, extension = FILES[fmt]
            file_changed, files = write_reports(module, dest, basename, {fmt: (extension, content)})
            changed |= file_changed
            paths.update(files)
    except ReportFileError as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(changed=changed, paths=paths, headline=headline(report["summary"]), summary=report["summary"])


if __name__ == "__main__":
    main()
