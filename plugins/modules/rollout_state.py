#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_state
short_description: Hold a node for one rollout (a lock in the node's state file) and record the rollout's phases on it
version_added: 0.2.0
description:
  - Keeps the C(rollout) section of the node state file (C(/etc/ansible/facts.d/gpufleet.fact), also read as
    C(ansible_local.gpufleet)) - which rollout holds the node, who runs it, when it took the node and last showed life,
    the wave, the phases with their times and the result.
  - Each call is one read-modify-write under the state file's lock, so two controllers that acquire one node at the same time
    cannot both win. A damaged state file is refused with how to repair it; nothing is ever reset silently.
  - O(action=acquire) takes a free node (or a node this O(rollout_id) already holds - a re-run resumes and keeps the phases). A node held
    by another rollout is refused with that rollout's id, owner, age and phase. A lock whose heartbeat is older than O(stale_after) is
    reported as stale with its owner and age, and taken over only with O(break_stale=true) (with a warning). A rollout that has finished on the
    node is left as it is (C(changed=false)), so a re-run of a finished rollout changes nothing.
  - Two runs of one O(rollout_id) (two operators, or a CLI run and an AWX job, rolling out the same BOM) are told apart by O(run_nonce) -
    an acquire whose nonce differs from the holder's is refused while the holder's heartbeat is fresh (not older than O(stale_after)), and
    takes the node over with a warning once it is stale (a run resumed after a crash). O(action=phase) and O(action=finish) of a run whose
    node another run holds are refused; its O(action=release) leaves the lock as it is.
  - O(action=phase) with O(status=started) opens a phase (its start time); V(ok), V(failed) or V(skipped) closes the open phase of that name
    (end time, status, O(detail)). Both refresh the heartbeat. Needs the node to be held by this rollout.
  - O(action=finish) records the O(result) (with its O(detail), and for V(rolled_back) or V(failed_drained) the O(rollback)) and frees
    the node; O(action=release) frees it without a result, only when this rollout holds it; O(action=read) returns the section.
  - The node keeps what its record in the rollout's evidence needs, so that a later run (resumed after a killed run, or from another
    controller) rebuilds the record whole - the phases, the result, the O(rollback) and the versions O(before) the change.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the state file and reports what would change (and whether an acquire would be refused); writes nothing.
  diff_mode:
    support: full
    details:
      - The diff shows the C(rollout) section before and after.
  idempotent:
    support: partial
    details:
      - A phase closed again with the same status, a finish with the same result and an acquire of a finished rollout change nothing.
      - An acquire of a running rollout and a phase start refresh the heartbeat (time stamps), so they report a change.
options:
  rollout_id:
    description: The rollout (C(gpufleet_rollout_id)); letters, digits, C(.), C(_) and C(-), 1 to 64.
    type: str
    required: true
  action:
    description: What to do.
    type: str
    choices: [acquire, phase, finish, release, read]
    default: read
  run_nonce:
    description:
      - One random value per playbook run (8 to 64 letters and digits), recorded with the lock; the rollout role makes it once on the
        controller. Without it two runs of one O(rollout_id) cannot be told apart (a re-run resumes).
    type: str
  owner:
    description: Who runs the rollout (for example C(alice@ctl-01 job 42)), shown to anyone it blocks. Required with O(action=acquire).
    type: str
  phase:
    description: The phase name with O(action=phase) (C(preflight), C(admission), C(drain), C(nic_firmware), C(gpu_firmware), C(driver), ...).
    type: str
  status:
    description: With O(action=phase), V(started) opens the phase; the others close it.
    type: str
    choices: [started, ok, failed, skipped]
  detail:
    description: Why a phase ended as it did (a failed check, a skip reason); at most 4000 characters.
    type: str
  next_phase:
    description:
      - With O(action=phase) and a closing O(status), the phase that follows, opened (V(started)) in the same write of the state file.
      - One task on the node instead of two, at every step of every node of a rollout. If it is open already, its start is kept.
    type: str
  result:
    description: The node's result with O(action=finish).
    type: str
    choices: [upgraded, unchanged, rolled_back, failed_drained, skipped]
  rollback:
    description:
      - With O(action=finish), the rollback's details - C(decided_by) (the failed phase, or who asked for it), C(reason) (the failed check
        and why) and C(result) (V(validated) or V(failed)). Required with O(result=rolled_back) (C(result=validated)); allowed with
        O(result=failed_drained) (C(result=failed)); refused with any other result.
    type: dict
  before:
    description:
      - The versions the node ran before this rollout changed it (C(driver), C(fabricmanager), C(gpu_firmware) - strings or null -
        and C(nic_firmware), a mapping of PSID to version), with O(action=acquire), V(phase) or V(finish).
      - Kept from the first write of the rollout that gives it - a resumed run reads a node it may have changed already.
    type: dict
  wave:
    description: The node's wave (V(0) is the canary); recorded with O(action=acquire) and O(action=phase).
    type: int
  stale_after:
    description: Seconds without a heartbeat after which another rollout's lock is stale (C(gpufleet_lock_stale_seconds)).
    type: int
    default: 86400
  break_stale:
    description: Take over a stale lock of another rollout (C(gpufleet_lock_break_stale)); a lock that is not stale is never broken.
    type: bool
    default: false
  state_file:
    description: The node state file.
    type: path
    default: /etc/ansible/facts.d/gpufleet.fact
seealso:
  - module: gpufleet.lifecycle.slurm_capacity
"""

EXAMPLES = r"""
- name: Hold the node for this rollout (refused when another rollout holds it)
  gpufleet.lifecycle.rollout_state:
    rollout_id: "{{ gpufleet_rollout_id }}"
    action: acquire
    owner: "{{ lookup('ansible.builtin.env', 'USER') }}@{{ lookup('ansible.builtin.pipe', 'hostname') }}"
    wave: 1
    stale_after: "{{ gpufleet_lock_stale_seconds }}"
    break_stale: "{{ gpufleet_lock_break_stale }}"
  register: gpufleet_lock

- name: Open the drain phase
  gpufleet.lifecycle.rollout_state:
    rollout_id: "{{ gpufleet_rollout_id }}"
    action: phase
    phase: drain
    status: started

- name: Close it
  gpufleet.lifecycle.rollout_state:
    rollout_id: "{{ gpufleet_rollout_id }}"
    action: phase
    phase: drain
    status: ok

- name: Record the result and free the node
  gpufleet.lifecycle.rollout_state:
    rollout_id: "{{ gpufleet_rollout_id }}"
    action: finish
    result: upgraded
"""

RETURN = r"""
rollout:
  description: The C(rollout) section after the task (in check mode, as it would be).
  returned: success
  type: dict
  contains:
    id:
      description: The rollout that holds or last held the node.
      type: str
    run:
      description: The run nonce of the run that holds or last held the node (O(run_nonce)); V(null) when none was given.
      type: str
    owner:
      description: Who runs it.
      type: str
    acquired_at:
      description: When it took the node (epoch seconds).
      type: float
    heartbeat_at:
      description: Its last change on the node (epoch seconds).
      type: float
    wave:
      description: The node's wave (V(0) is the canary).
      type: int
    phase:
      description: The last phase recorded.
      type: str
    status:
      description: V(running) (holds the node), V(done) (finished) or V(released).
      type: str
    result:
      description: The result recorded by O(action=finish).
      type: str
    phases:
      description: The phases, each C(name), C(start), C(end) (epoch seconds; C(end) V(null) while open), C(status) and C(detail).
      type: list
      elements: dict
    detail:
      description: The O(detail) of the finish (why a node was skipped, why it was rolled back).
      type: str
    before:
      description: The versions before the change (O(before)); V(null) when none was recorded.
      type: dict
    rollback:
      description: The rollback's details (O(rollback)); V(null) when the node was not rolled back.
      type: dict
  sample:
    id: r-3f2a9c01de
    run: 7c1e0b9a44d2f6a1
    owner: alice@ctl-01 job 42
    acquired_at: 1764590000.1
    heartbeat_at: 1764590042.7
    wave: 1
    phase: drain
    status: running
    result: null
    updated_at: "2026-12-01T12:00:42+00:00"
    phases: [{name: drain, start: 1764590000.1, end: 1764590042.7, status: ok, detail: null}]
lock:
  description: Who holds the node after the task.
  returned: always
  type: dict
  contains:
    held_by:
      description: The rollout holding the node; V(null) when it is free.
      type: str
    owner:
      description: Its owner.
      type: str
    age_s:
      description: Seconds since its last heartbeat.
      type: float
    stale:
      description: Whether that is more than O(stale_after).
      type: bool
    phase:
      description: Its last phase.
      type: str
  sample: {held_by: r-3f2a9c01de, owner: alice@ctl-01 job 42, age_s: 12.5, stale: false, phase: drain}
state_file:
  description: The state file.
  returned: success
  type: str
  sample: /etc/ansible/facts.d/gpufleet.fact
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.lock import DEFAULT_STALE, ROLLOUT_ACTIONS, check_params, run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rollout_id=dict(type="str", required=True),
            run_nonce=dict(type="str"),
            action=dict(type="str", choices=list(ROLLOUT_ACTIONS), default="read"),
            owner=dict(type="str"),
            phase=dict(type="str"),
            status=dict(type="str", choices=["started", "ok", "failed", "skipped"]),
            detail=dict(type="str"),
            next_phase=dict(type="str"),
            result=dict(type="str", choices=["upgraded", "unchanged", "rolled_back", "failed_drained", "skipped"]),
            rollback=dict(type="dict"),
            before=dict(type="dict"),
            wave=dict(type="int"),
            stale_after=dict(type="int", default=DEFAULT_STALE),
            break_stale=dict(type="bool", default=False),
            state_file=dict(type="path", default="/etc/ansible/facts.d/gpufleet.fact"),
        ),
        required_if=[("action", "acquire", ["owner"]), ("action", "phase", ["phase", "status"]), ("action", "finish", ["result"])],
        supports_check_mode=True,
    )
    try:
        check_params(module.params)
        result = run(module.params, check_mode=module.check_mode)
    except GpufleetError as exc:
        kwargs = exc.fail_kwargs()
        kwargs["changed"] = False
        module.fail_json(**kwargs)
    for note in result.pop("warnings_text"):
        module.warn(note)
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
