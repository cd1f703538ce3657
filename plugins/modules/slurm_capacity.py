#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_capacity
short_description: Admit a rollout wave only when the nodes Slurm shows unavailable, plus the wave, stay within the budget
version_added: 0.2.0
description:
  - Reads every node from Slurm (C(scontrol show node -o), one call per poll) and counts the nodes of O(pool) that are
    unavailable - for any reason and to anyone, not only to this rollout - as the scheduler shows them now, not as the playbook
    remembers them.
  - >-
    A pool node is unavailable when it is C(DOWN), has C(DRAIN) (draining or drained), C(FAIL), C(NOT_RESPONDING),
    C(REBOOT_REQUESTED) or C(REBOOT_ISSUED), C(MAINTENANCE), C(POWERED_DOWN) (or is powering up or down, or asked to power down),
    is C(FUTURE), C(UNKNOWN) or C(ERROR), or is not known to Slurm at all.
  - >-
    The wave is admitted when the unavailable nodes together with the O(admit) nodes (a node in both counts once) are at most the
    budget, O(max_unavailable) resolved against the size of O(pool). Nodes that failed earlier in the rollout and stay drained keep
    counting, so failures brake the rollout.
  - Otherwise the task polls every O(poll_interval) seconds for at most O(wait_timeout) seconds and then fails with the unavailable
    nodes, their state, reason and whose they are (this rollout's, by its reason marker, or others'), the budget and what to do.
  - >-
    With O(spread_by), each O(admit) node must also leave at most O(max_per_domain) nodes of its domain value out of service at
    once (the sliding window of a rollout admits one node at a time, as soon as it fits).
  - >-
    Reading and draining are two steps: two admissions at once (two slices of one AWX job, two controllers) could both read the
    same free capacity and both drain. With O(drain_admitted=true) the admission itself drains the admitted nodes (with this
    rollout's marker, which the rollout's own drain then takes over), and it reads, judges and drains under a Slurm reservation
    named C(OWNER_TAG-admission) used as a mutex, so the next admission reads them drained. slurmctld refuses a second
    reservation of that name, which makes taking it atomic whatever host runs scontrol; it lasts 2 minutes at most, so a holder
    that dies frees it by expiry. It sits on the first pool node (flags C(IGNORE_JOBS,OVERLAP), no C(MAINT)): that node stays
    available, and for the instant the reservation exists only its user may start new jobs there.
  - Runs on any host with the Slurm client commands (C(delegate_to) the Slurm client, C(run_once)); without O(drain_admitted)
    it changes nothing.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads Slurm once and never waits; reports RV(admitted) and the nodes it would drain without failing (a warning says why
        it would refuse). It takes no mutex and drains nothing.
  diff_mode:
    support: full
    details:
      - With O(drain_admitted), the drained nodes' state before and after.
  idempotent:
    support: full
    details:
      - A node already out of service is counted, not drained again; a second call with the same O(admit) drains nothing more.
options:
  pool:
    description: The Slurm node names whose capacity the budget protects (C(gpufleet_capacity_pool)).
    type: list
    elements: str
    required: true
  max_unavailable:
    description:
      - How many pool nodes may be unavailable at once - a count (V(4)) or a percentage of the pool (V(10%), rounded down, at
        least 1). V(0), negative numbers and more than V(100%) are refused.
    type: raw
    required: true
  admit:
    description: The pool nodes this wave is about to take out of service; every one must be in O(pool).
    type: list
    elements: str
    default: []
  wait_timeout:
    description: How long to wait for capacity, in seconds (V(0) refuses at once); at most 86400.
    type: int
    default: 0
  poll_interval:
    description: Seconds between two reads of Slurm while waiting (1 to 3600).
    type: int
    default: 10
  rollout_id:
    description: The rollout; a node whose reason is this rollout's marker (C(OWNER_TAG:ROLLOUT_ID:) and a text) is reported as ours.
    type: str
  owner_tag:
    description: The first part of the marker, as given to M(gpufleet.lifecycle.slurm_node); also names the admission mutex.
    type: str
    default: gpufleet
  drain_admitted:
    description:
      - Drain the admitted O(admit) nodes that are in service, in the same step as the reading, under the admission mutex, so that
        concurrent admissions (job slices, several controllers) never both take the same free capacity.
      - >-
        Needs O(rollout_id) (the drain's reason is C(OWNER_TAG:ROLLOUT_ID: DRAIN_REASON)) and a Slurm administrator or operator.
    type: bool
    default: false
    version_added: 0.2.0
  drain_reason:
    description: The text after the marker in the drain's reason (one line, 1 to 200 characters).
    type: str
    default: admitted by slurm_capacity
    version_added: 0.2.0
  spread_by:
    description:
      - Domain variables (for example V(rack)) whose values bound how many nodes may be out of service at once
        (O(max_unavailable) still holds). Each O(admit) node is admitted only when at most O(max_per_domain) nodes of its value,
        with it, are out; nodes whose domain O(domains) does not give do not count for any domain.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  domains:
    description: "Each pool node's domain values, C({node: {variable: value}}) (the wave plan's C(domains), by Slurm node name)."
    type: dict
    default: {}
    version_added: 0.2.0
  max_per_domain:
    description: How many nodes of one value of each O(spread_by) variable may be out of service at once.
    type: int
    default: 1
    version_added: 0.2.0
  read_jobs:
    description:
      - Also read each pool node's running jobs (C(squeue), one call) and return RV(job_ends), the latest end time of each busy node.
        The rollout orders its nodes by it (idle nodes and nodes whose jobs end first go first).
    type: bool
    default: false
    version_added: 0.2.0
  squeue_path:
    description: The C(squeue) binary (O(read_jobs)); found on the C(PATH) when not given.
    type: path
    version_added: 0.2.0
  scontrol_path:
    description: The C(scontrol) binary; found on the C(PATH) when not given.
    type: path
notes:
  - Give the Slurm client's environment (for example C(SLURM_CONF)) with the task's C(environment) keyword.
seealso:
  - module: gpufleet.lifecycle.slurm_node
  - plugin: gpufleet.lifecycle.wave_plan
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Admit this wave within the capacity budget (waiting up to 30 minutes for capacity)
  gpufleet.lifecycle.slurm_capacity:
    pool: "{{ gpufleet_capacity_pool }}"
    max_unavailable: "{{ gpufleet_max_unavailable }}"
    admit: "{{ ansible_play_batch | map('extract', hostvars, 'gpufleet_slurm_node_name') | list }}"
    wait_timeout: "{{ gpufleet_capacity_wait_seconds }}"
    poll_interval: 15
    rollout_id: "{{ gpufleet_rollout_id }}"
  delegate_to: "{{ gpufleet_slurm_client }}"
  run_once: true
  environment: "{{ gpufleet_slurm_environment }}"
  register: gpufleet_admission
"""

RETURN = r"""
admitted:
  description: Whether the unavailable nodes and the wave fit the budget at the last read.
  returned: always
  type: bool
  sample: true
budget:
  description: O(max_unavailable) resolved against the pool.
  returned: always
  type: int
  sample: 3
pool_size:
  description: How many nodes O(pool) holds.
  returned: always
  type: int
  sample: 32
unavailable:
  description: The unavailable pool nodes at the last read.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The Slurm node name.
      type: str
    state:
      description: Slurm's state (C(IDLE+DRAIN), C(DOWN+NOT_RESPONDING)...), or C(not known to Slurm).
      type: str
    reason:
      description: Slurm's reason, without the C([user@time]) Slurm appends; V(null) when none.
      type: str
    ours:
      description: Whether the reason is this rollout's marker.
      type: bool
  sample: [{node: gpu-07, state: IDLE+DRAIN, reason: "hw ticket 4711", ours: false}]
counted:
  description: How many nodes count against the budget - the unavailable ones and O(admit) together, each once.
  returned: always
  type: int
  sample: 3
admit:
  description: O(admit) as given.
  returned: always
  type: list
  elements: str
  sample: [gpu-05, gpu-09]
drained:
  description: The O(admit) nodes this call drained (O(drain_admitted)); in check mode, the ones it would drain.
  returned: always
  type: list
  elements: str
  sample: [gpu-05]
held_by_others:
  description:
    - The O(admit) nodes out of service for someone else at this reading (a person's drain, a node DOWN). They are counted as out
      already and not drained, so their slot is not the caller's; the rollout skips them rather than drain them later.
  returned: always
  type: list
  elements: str
  sample: [gpu-07]
waited_s:
  description: Seconds spent waiting for capacity.
  returned: always
  type: float
  sample: 0.0
samples:
  description: How many times Slurm was read.
  returned: always
  type: int
  sample: 1
waited_why:
  description: Why O(admit) did not fit at the first read that refused it (the budget, or a domain rule); empty when it fit at once.
  returned: always
  type: str
  sample: "gpu-05: 2 of the budget of 2 nodes are out of service (gpu-01, gpu-02): no slot is free"
job_ends:
  description:
    - With O(read_jobs), the latest end time Slurm gives the running jobs of each busy pool node (ISO 8601, the Slurm
      controller's local time), or C(Unknown) when a job has none; idle nodes are left out.
  returned: when O(read_jobs) is true
  type: dict
  sample: {gpu-03: "2026-12-05T19:30:00", gpu-07: Unknown}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.capacity import check_params, run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pool=dict(type="list", elements="str", required=True),
            max_unavailable=dict(type="raw", required=True),
            admit=dict(type="list", elements="str", default=[]),
            wait_timeout=dict(type="int", default=0),
            poll_interval=dict(type="int", default=10),
            rollout_id=dict(type="str"),
            owner_tag=dict(type="str", default="gpufleet"),
            scontrol_path=dict(type="path"),
            drain_admitted=dict(type="bool", default=False),
            drain_reason=dict(type="str", default="admitted by slurm_capacity"),
            spread_by=dict(type="list", elements="str", default=[]),
            domains=dict(type="dict", default={}),
            max_per_domain=dict(type="int", default=1),
            read_jobs=dict(type="bool", default=False),
            squeue_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    try:
        check_params(module.params)
        result = run(module, module.params)
    except GpufleetError as exc:
        kwargs = exc.fail_kwargs()
        kwargs.update(getattr(exc, "result", None) or {})
        kwargs["changed"] = False
        module.fail_json(**kwargs)
    for note in result.pop("warnings_text", []):
        module.warn(note)
    if module._diff and result["drained"]:
        result["diff"] = {"before": {name: "in service" for name in result["drained"]},
                          "after": {name: f"DRAIN: {module.params['owner_tag']}:{module.params['rollout_id']}: {module.params['drain_reason']}"
                                    for name in result["drained"]}}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
