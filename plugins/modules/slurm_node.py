#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_node
short_description: Drain, resume or reboot a Slurm node, never touching a drain that someone else set
version_added: 0.1.0
description:
  - Takes a Slurm node out of service for maintenance and puts it back, with C(scontrol).
  - >-
    O(state=drained) runs C(scontrol update NodeName=NODE State=DRAIN Reason=REASON). The reason starts with a marker naming the
    collection and the rollout (C(gpufleet:ROLLOUT_ID: REASON)), so that a later O(state=resumed) knows the drain is ours.
    With O(wait=true) the task waits until the node is C(DRAINED) (no job left); while jobs run it is C(DRAINING).
  - >-
    O(state=resumed) runs C(scontrol update NodeName=NODE State=RESUME) only when the node is B(ours), which takes all of -
    its reason is exactly C(OWNER_TAG:ROLLOUT_ID: TEXT) (one line) with O(rollout_id); Slurm says it was set by the user this
    task runs as (or by C(SlurmUser) when Slurm itself appended C(: reboot issued) / C(: reboot complete)); and the node is
    out of service only in a way this module causes - the C(DRAIN) flag, a reboot it asked for, or C(DOWN) right after that
    reboot completed.
  - Anything else is someone else's and is left alone with a warning that says why - another rollout's or a person's reason,
    a reason that merely starts with the marker, the C(FAIL) flag (C(State=DRAIN) would replace it and C(State=RESUME) clear it),
    C(DOWN) for any other cause (C(Not responding), an administrator, our reboot timed out), C(FUTURE) or C(UNKNOWN).
    The task reports RV(drained_by_others=true); O(force=true) is the only way past it (O(state=resumed) only).
  - A node out of service for someone else, or one carrying someone else's reason, is left alone by O(state=drained) and
    O(state=rebooted) too (their reason is kept); the task reports RV(drained_by_others=true) so that a rollout counts the
    node as unavailable and skips it, with RV(drain_state) and RV(jobs) of that node.
  - The node is read again right before any C(scontrol update) or C(scontrol reboot); when someone else drained it since the
    first read, the task backs off (their reason is kept, RV(drained_by_others=true), a warning) instead of overwriting it.
  - O(state=rebooted) runs C(scontrol reboot ASAP nextstate=DOWN reason=REASON NODE); Slurm drains the node, reboots it when it is idle
    (the cluster's C(RebootProgram)) and leaves it C(DOWN) with our reason, to be resumed after validation.
  - Runs on the node itself (O(node) defaults to its short host name) or on any Slurm client host (C(delegate_to)).
  - O(state=rebooted) on the node itself may lose the task's connection when Slurm reboots the node at once (an idle node);
    delegate it to another Slurm client, as the rollout does.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the node and predicts the change; runs no C(scontrol update) and does not wait.
  diff_mode:
    support: full
    details:
      - The diff shows the node's Slurm state and reason before and after.
  idempotent:
    support: full
options:
  node:
    description:
      - The Slurm C(NodeName). Defaults to the short host name of the host the module runs on.
      - One node - letters, digits, C(.), C(_) and C(-); a hostlist (C(gpu[01-04])) or a list is refused.
    type: str
  state:
    description:
      - V(drained) drains the node, V(resumed) puts a node we drained back in service, V(rebooted) asks Slurm to reboot it when idle.
    type: str
    choices: [drained, resumed, rebooted]
    required: true
  reason:
    description:
      - Why the node is drained or rebooted; the module prefixes it with the marker C(OWNER_TAG:ROLLOUT_ID:).
      - Required with O(state=drained) and O(state=rebooted).
      - One line of 1 to 1024 printable characters (no newline, tab or other control character).
    type: str
  rollout_id:
    description:
      - The rollout that drains the node; written into the marker. With O(state=resumed), only a drain of this rollout is resumed.
      - Required, because it is what makes a drain ours - without it a resume could not tell this rollout's drain from
        another's. Only O(state=resumed) with O(force=true) goes without it.
      - 1 to 64 letters, digits, C(.), C(_) and C(-).
    type: str
  owner_tag:
    description:
      - The marker's first part, naming who owns the drain. Change it only to tell several automation systems apart.
      - 1 to 64 letters, digits, C(.), C(_) and C(-).
    type: str
    default: gpufleet
  wait:
    description:
      - With O(state=drained), wait until no job runs on the node (C(DRAINED)). On timeout the task fails with the jobs still
        running (from C(squeue)) and the drain stays in place.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for C(DRAINED) with O(wait=true), from 1 to 86400.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between two looks at the node while waiting, from 1 to 3600.
    type: int
    default: 5
  force:
    description:
      - Resume the node even when it is not ours - someone else drained it, took it down or set C(FAIL).
      - B(Dangerous) - it puts back in service a node that an administrator, a health check or Slurm itself took out,
        maybe for a hardware fault. Prefer resuming such nodes by hand.
    type: bool
    default: false
  nextstate:
    description: The state Slurm gives the node after a reboot requested with O(state=rebooted).
    type: str
    choices: [down, resume]
    default: down
  scontrol_path:
    description: Path of C(scontrol). Searched in E(PATH) and the sbin and bin folders when not set.
    type: path
  squeue_path:
    description: Path of C(squeue), used to list the node's jobs. Searched when not set; without it RV(before.jobs) is V(null).
    type: path
notes:
  - The node's Slurm configuration is found as C(scontrol) finds it (E(SLURM_CONF), C(/etc/slurm/slurm.conf), or configless).
  - A node that is C(DOWN) for someone else counts as drained by others, like a C(DRAIN) with their reason.
seealso:
  - name: scontrol manual
    description: Node states, drain and reboot.
    link: https://slurm.schedmd.com/scontrol.html
"""

EXAMPLES = r"""
- name: Drain the node for the driver upgrade and wait for its jobs to end
  gpufleet.lifecycle.slurm_node:
    state: drained
    reason: driver upgrade to 570.124.06
    rollout_id: "{{ gpufleet_rollout_id }}"
    wait: true
    timeout: 3600
  register: drain

- name: Skip nodes that someone else took out of service
  ansible.builtin.meta: end_host
  when: drain.drained_by_others

- name: Put the node back in service (only if this rollout drained it)
  gpufleet.lifecycle.slurm_node:
    state: resumed
    rollout_id: "{{ gpufleet_rollout_id }}"

- name: Drain a node from the Slurm controller instead of the node itself
  gpufleet.lifecycle.slurm_node:
    node: "{{ inventory_hostname_short }}"
    state: drained
    reason: firmware update
    rollout_id: "{{ gpufleet_rollout_id }}"
  delegate_to: slurm-ctl-01
"""

RETURN = r"""
node:
  description: The Slurm node name.
  returned: always
  type: str
  sample: gpu-017
action:
  description: What was done (or would be done in check mode), V(null) when nothing.
  returned: always
  type: str
  sample: drain
drained_by_others:
  description:
    - True when the node is not ours but out of service for someone else or carrying their reason (see RV(before.hold_why)).
      Such a node is left as it is unless O(force=true).
  returned: always
  type: bool
  sample: false
reason:
  description: The full reason the module sets, with its marker.
  returned: when O(state) is V(drained) or V(rebooted)
  type: str
  sample: "gpufleet:2026-06-01-r1: driver upgrade to 570.124.06"
before:
  description: The node before the task.
  returned: always
  type: dict
  contains:
    name:
      description: NodeName.
      type: str
      returned: always
      sample: gpu-017
    state:
      description: The state as C(scontrol) prints it, with its flags.
      type: str
      returned: always
      sample: MIXED+DRAIN
    base_state:
      description: The state without flags (V(IDLE), V(ALLOCATED), V(MIXED), V(DOWN), V(ERROR), V(FUTURE), V(UNKNOWN)).
      type: str
      returned: always
      sample: MIXED
    flags:
      description:
        - The state flags as Slurm 21.08 and later print them (V(DRAIN), V(FAIL), V(REBOOT_REQUESTED), V(COMPLETING)...);
          not responding is apart. An unknown flag fails the task with nothing changed.
      type: list
      elements: str
      returned: always
      sample: [DRAIN]
    not_responding:
      description: Slurm cannot reach the node's slurmd (C(NOT_RESPONDING) or C(*)).
      type: bool
      returned: always
      sample: false
    drain:
      description: The node has the DRAIN flag.
      type: bool
      returned: always
      sample: true
    down:
      description: The node is DOWN.
      type: bool
      returned: always
      sample: false
    drain_state:
      description: V(draining) (drain flag, jobs still run), V(drained) (drain flag, no job) or V(null).
      type: str
      returned: always
      sample: draining
    reason:
      description: The node's reason, without the user and time Slurm appends; its later lines (if any) follow a newline.
      type: str
      returned: always
      sample: "gpufleet:r1: driver upgrade"
    reason_user:
      description: Who set the reason.
      type: str
      returned: always
      sample: root
    reason_time:
      description: When the reason was set, as Slurm prints it.
      type: str
      returned: always
      sample: "2026-06-01T10:12:44"
    boot_time:
      description:
        - When the node last booted, as Slurm knows it (C(BootTime), set when slurmd registers after a boot); V(null) when
          Slurm prints none. A caller that rebooted or power-cycled the node outside Slurm waits until it changes, to know
          that Slurm has seen the new boot.
      type: str
      returned: always
      sample: "2026-06-01T10:20:03"
      version_added: 0.2.0
    ours:
      description:
        - The node is out of service for this rollout - our exact marker and O(rollout_id), set by this task's user, in a state
          this module causes (see the description).
      type: bool
      returned: always
      sample: true
    rollout_id:
      description: The rollout named by a reason in our marker's form (V(null) for any other reason), whichever rollout it is.
      type: str
      returned: always
      sample: r1
    hold:
      description:
        - V(in_service), V(ours) (out of service for this rollout) or V(others) (out of service for someone else, or holding
          their reason).
      type: str
      returned: always
      sample: ours
    hold_why:
      description: With RV(before.hold=others), why the node is not ours; V(null) otherwise.
      type: str
      returned: always
      sample: "it has the FAIL flag, set by an administrator or Slurm (a drain would replace it, a resume clear it)"
    foreign_reason:
      description: The node carries a reason that is not ours.
      type: bool
      returned: always
      sample: false
    fail:
      description: The node has the FAIL flag.
      type: bool
      returned: always
      sample: false
    cpu_alloc:
      description: CPUs allocated to jobs.
      type: int
      returned: always
      sample: 16
    cpu_total:
      description: CPUs of the node.
      type: int
      returned: always
      sample: 128
    jobs:
      description: Jobs on the node from C(squeue) (id, user, name); V(null) when C(squeue) is not installed.
      type: list
      elements: dict
      returned: always
      sample: [{id: "4711", user: alice, name: train-llm}]
after:
  description:
    - The node after the task, same keys as RV(before). In check mode, the node as it is (nothing changed).
    - When the node asked Slurm to reboot itself, the node as it was before the request (a read would race the reboot); the diff
      shows the predicted state.
  returned: success
  type: dict
waited_s:
  description: Seconds spent waiting for C(DRAINED).
  returned: always
  type: float
  sample: 42.5
drain_state:
  description:
    - With O(state=drained) on a node out of service for someone else, whether their drain still waits for jobs
      (V(draining)), is complete (V(drained)), or is no drain (V(null), for example a C(DOWN) node).
  returned: when O(state=drained) and RV(drained_by_others) is true
  type: str
  sample: draining
jobs:
  description:
    - Jobs still running when the wait timed out.
    - With O(state=drained) on a node out of service for someone else, the jobs on it (V(null) when C(squeue) is not installed).
  returned: when the wait timed out, or when O(state=drained) and RV(drained_by_others) is true
  type: list
  elements: dict
  sample: [{id: "4711", user: alice, name: train-llm}]
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.slurm import check_params, run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str"),
            state=dict(type="str", required=True, choices=["drained", "resumed", "rebooted"]),
            reason=dict(type="str"),
            rollout_id=dict(type="str"),
            owner_tag=dict(type="str", default="gpufleet"),
            wait=dict(type="bool", default=False),
            timeout=dict(type="int", default=1800),
            poll_interval=dict(type="int", default=5),
            force=dict(type="bool", default=False),
            nextstate=dict(type="str", choices=["down", "resume"], default="down"),
            scontrol_path=dict(type="path"),
            squeue_path=dict(type="path"),
        ),
        required_if=[("state", "drained", ["reason"]), ("state", "rebooted", ["reason"])],
        supports_check_mode=True,
    )
    params = dict(module.params)
    if not params["node"]:
        params["node"] = platform_node()
    params["runs_on_node"] = params["node"] == platform_node()
    try:
        check_params(params)
    except GpufleetError as exc:
        module.fail_json(**exc.fail_kwargs())
    try:
        result = run(module, params)
    except GpufleetError as exc:
        extra = getattr(exc, "result", None) or {}
        kwargs = exc.fail_kwargs()
        for key in ("node", "before", "after", "drained_by_others", "reason", "action"):
            if key in extra:
                kwargs[key] = extra[key]
        if getattr(exc, "jobs", None) is not None:
            kwargs["jobs"] = exc.jobs
        kwargs["changed"] = bool(extra.get("changed"))
        module.fail_json(**kwargs)
    for note in result.pop("warnings_text", []):
        module.warn(note)
    module.exit_json(**result)


def platform_node():
    """The short host name (Slurm NodeNames are usually short names)."""
    return socket.gethostname().split(".")[0]


if __name__ == "__main__":
    main()
