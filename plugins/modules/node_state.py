#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_state
short_description: Read the node state file (last known good versions, rollout, history) of a GPU node
version_added: 0.2.0
description:
  - Reads the node state file O(state_file) that M(gpufleet.lifecycle.nvidia_driver), M(gpufleet.lifecycle.mlxfw) and
    M(gpufleet.lifecycle.nvfwupd) write, and returns its last known good versions, its rollout section and the end of its history.
  - The rollback entry points of the roles read the version to return to here, never with C(slurp) and C(from_json), so that a
    damaged file fails with a message that names the damage and how to repair it, and a file of a newer schema is refused.
  - A missing file is a new node (RV(exists=false), nothing recorded). The module never writes.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.attributes.INFO_MODULE
options:
  state_file:
    description: The node state file (JSON, readable as C(ansible_local.gpufleet)).
    type: path
    default: /etc/ansible/facts.d/gpufleet.fact
  history:
    description: How many of the latest history entries to return, from V(0) to V(200).
    type: int
    default: 20
notes:
  - The file is read without its lock; it is only ever replaced by a rename, so the module reads a whole old or a whole new document.
seealso:
  - module: gpufleet.lifecycle.nvidia_driver
  - module: gpufleet.lifecycle.mlxfw
  - module: gpufleet.lifecycle.nvfwupd
"""

EXAMPLES = r"""
- name: Read the last known good driver
  gpufleet.lifecycle.node_state:
  register: node_state

- name: Show it
  ansible.builtin.debug:
    msg: "{{ node_state.last_known_good.driver.version | default('none recorded') }}"
"""

RETURN = r"""
exists:
  description: Whether the file exists (V(false) on a new node; then everything else is empty).
  returned: always
  type: bool
  sample: true
state_file:
  description: The file read.
  returned: always
  type: str
  sample: /etc/ansible/facts.d/gpufleet.fact
last_known_good:
  description: The last known good entry per component (C(driver), C(fabricmanager), C(gpu_firmware), C(nic_firmware)).
  returned: always
  type: dict
  sample:
    driver: {version: 550.90.07, method: runfile, kernel_module: open, recorded_at: "2026-11-30T10:00:00+00:00"}
    nic_firmware: {version: 28.40.1000, devices: {"0000:1a:00.0": {psid: MT_0000000838, version: 28.40.1000}}}
rollout:
  description: The rollout section (id, phase and what the rollout records).
  returned: always
  type: dict
  sample: {id: r-1a2b3c4d5e, phase: driver, updated_at: "2026-11-30T10:00:00+00:00"}
history:
  description: The latest O(history) history entries, oldest first.
  returned: always
  type: list
  elements: dict
  sample: [{time: "2026-11-30T10:00:00+00:00", component: driver, action: upgrade, before: 550.90.07, after: 570.124.06, result: ok}]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs

ARGUMENT_SPEC = {
    "state_file": {"type": "path", "default": _state.DEFAULT_PATH},
    "history": {"type": "int", "default": 20},
}


def read(params):
    """The result for ``params``: the document's sections, or GpufleetError (a damaged file, a bad option)."""
    count = params["history"]
    if not 0 <= count <= _state.HISTORY_LIMIT:
        raise GpufleetError(f"history must be a number of entries from 0 to {_state.HISTORY_LIMIT}, got {count}. Nothing was read")
    path = params["state_file"]
    if not path.startswith("/"):
        raise GpufleetError(f"state_file must be an absolute path, got {path!r}")
    exists = os.path.lexists(path)  # load refuses a link or a damaged file itself
    doc = _state.load(path)
    return {
        "changed": False,
        "exists": exists,
        "state_file": path,
        "last_known_good": doc["last_known_good"],
        "rollout": doc["rollout"],
        "history": doc["history"][len(doc["history"]) - count :] if count else [],
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = read(module.params)
    except GpufleetError as exc:
        module.fail_json(**fail_kwargs(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
