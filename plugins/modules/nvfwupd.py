#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvfwupd
short_description: Update GPU and HGX baseboard firmware through the node's BMC with NVIDIA's nvfwupd
version_added: 0.1.0
description:
  - Runs NVIDIA's C(nvfwupd) against a node's BMC (Redfish), as operators do, on the controller or a management host
    (C(delegate_to)). Reads the firmware with C(show_version -p PKG -s -j), plans per component (installed, staged,
    package version, action), returns the plan in check mode, flashes with C(update_fw -b -j), follows the BMC's task with
    C(show_update_progress -j) until it ends, and reads the firmware again.
  - The package's sha256 (O(checksum)) is verified before anything else; a mismatch fails and nothing is run.
  - The BMC's TLS certificate is verified (O(bmc.validate_certs), O(bmc.ca_path)) before nvfwupd, which checks none, gets the
    BMC's password.
  - A package that would downgrade a component is refused unless O(allow_downgrade=true); then the update runs between
    C(force_update enable) and C(force_update disable), and the disable runs on every exit path and is checked with C(force_update status).
  - Every run with O(state=present) reads C(force_update status) first. Before C(force_update enable) a record (no secret) is written
    in C(~/.ansible/gpufleet/nvfwupd-force-update/) on the host that runs the module; a ForceUpdate that a killed run left on (its
    record says so) is turned off, one that no record explains is someone else's and refuses a flash before anything is flashed.
  - The BMC's account reaches nvfwupd only in a 0600 C(-c) config file in a private folder inside the module's Ansible tmp dir, removed
    on every exit path and by Ansible when the module is killed (with pipelining, by the next run), never on a command line.
    nvfwupd retries a failed HTTPS connection over plain C(http://) with the same credentials;
    the module runs it with C(http_proxy) set to an address that cannot resolve and C(no_proxy) cleared, so that no plain-HTTP
    request leaves the host. The HTTPS proxy variables are cleared too, since nvfwupd talks to the BMC directly.
  - nvfwupd exits 0 with C(-j) even when it cannot connect; the module judges the JSON document (C(Error Code)), never the exit status alone.
  - Output that cannot be read (JSON nested too deeply included) fails naming the nvfwupd command and what to do; a C(show_version) that
    lists one component twice with different versions fails before anything is flashed (a row repeated as it was counts once).
  - New firmware is staged; RV(activation_required) says which resets activate it. O(state=record) writes RV(state_record) into the
    node state file (run it on the node, as the role does).
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details:
      - The diff is the installed firmware version per component before, and the installed and staged versions after it.
  idempotent:
    support: full
    details:
      - A component whose package version is installed or staged (waiting for its activation) is not flashed again.
options:
  bmc:
    description: The node's BMC.
    type: dict
    suboptions:
      address:
        description: The BMC's management address (IP address or host name).
        type: str
        required: true
      user:
        description: The BMC account.
        type: str
        required: true
      password:
        description:
          - The BMC account's password; give O(bmc_password) instead.
          - Still taken - the collection's action plugin moves it to O(bmc_password) before the module runs, so that it stays
            out of the module's "Invoked with" line in syslog or the journal, where O(bmc) is logged as text whose escaping
            (a backslash, a tab, a quote, a newline) would defeat its masking. Run without the action plugin, such a password is logged.
          - Giving both it and O(bmc_password) fails.
        type: str
      port:
        description: The BMC's HTTPS port (V(443) unless the BMC is reached through port forwarding).
        type: int
        default: 443
      servertype:
        description: nvfwupd's platform type.
        type: str
        choices: [HGX, DGX, HGXB100, GB200, GB300, MGX-NVL]
        default: HGX
      validate_certs:
        description:
          - Check the BMC's TLS certificate (against O(bmc.ca_path), else the system's CAs, and for O(bmc.address)) before nvfwupd
            gets the password. nvfwupd checks none itself (it calls Redfish with C(verify=False)), so the module opens a TLS
            connection of its own to O(bmc.address):O(bmc.port) and sends C(GET /redfish/v1/) without credentials first; a
            certificate it cannot verify (or a BMC it cannot reach) fails naming the BMC, before the config file is written or nvfwupd runs.
          - V(false) skips the check, with a warning - anyone on the network path to the BMC could then receive its password.
            Only on a management network you trust.
        type: bool
        default: true
        version_added: 0.2.0
      ca_path:
        description:
          - The CA bundle (PEM) that signed the BMC's certificate (the gpu_firmware role passes C(gpufleet_bmc_ca_path)).
            Without it the system's CAs are trusted.
        type: path
        version_added: 0.2.0
  bmc_password:
    description:
      - The password of O(bmc.user). Required with O(bmc) (or O(bmc.password)).
      - Passed to nvfwupd in a 0600 config file only; never in output or logs.
    type: str
    version_added: 0.2.0
  package:
    description: Absolute path of the C(.fwpkg) PLDM package on the host that runs the module. Required with O(state=present).
    type: path
  checksum:
    description: The package's sha256 (V(sha256:<hex>) or bare hex). Required with O(package).
    type: str
  targets:
    description:
      - Firmware inventory names to update (for example V(HGX_FW_GPU_SXM_1)); empty means every component the package covers.
      - A name the package does not cover on this system fails before anything is flashed.
    type: list
    elements: str
    default: []
  stage_only:
    description:
      - Stage the images without activating them (nvfwupd C(update_fw -u), the BMC's C(StageOnly) update option), so that a
        GB200 / GB300 NVL72 compute tray keeps serving while the images are pushed and is down only for the activation
        (the tray's AC power cycle, C(AuxPowerCycle)).
      - Only with O(bmc.servertype) V(GB200) or V(GB300); refused before any command otherwise. A BMC that does not list
        C(StageOnly) in its update options makes nvfwupd refuse, and the module fails naming it, with nothing flashed.
    type: bool
    default: false
  state:
    description:
      - V(present) brings the components to the package's versions; V(query) only reads (and plans, with O(package));
        V(record) writes O(record) into the node state file O(state_file) (no BMC access).
    type: str
    choices: [present, query, record]
    default: present
  allow_downgrade:
    description: Allow components to go to an older version (a rollback). Without it a downgrade fails before anything is flashed.
    type: bool
    default: false
  timeout:
    description: Seconds that the whole update (upload, flashing, polling) may take; each nvfwupd call is bounded by what is left.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between two C(show_update_progress) calls.
    type: int
    default: 5
  nvfwupd_path:
    description:
      - The nvfwupd command, or NVIDIA's C(nvfwupd.py) script together with O(nvfwupd_interpreter).
        Default C(nvfwupd) on E(PATH).
    type: path
  nvfwupd_interpreter:
    description: The Python that runs O(nvfwupd_path) (the C(python) of the virtualenv holding nvfwupd's requirements).
    type: path
  record:
    description: With O(state=record), the RV(state_record) of an earlier call.
    type: dict
  state_file:
    description: With O(state=record), the node state file.
    type: path
    default: /etc/ansible/facts.d/gpufleet.fact
  rollout_id:
    description:
      - The rollout this change belongs to (recorded in RV(state_record)); letters, digits, C(.), C(_) and C(-), 1 to 64.
        Anything else (a trailing newline included) fails before anything runs.
    type: str
"""

EXAMPLES = r"""
- name: Bring the GPU baseboard to the BOM's firmware package (from the controller)
  gpufleet.lifecycle.nvfwupd:
    bmc:
      address: "{{ bmc_address }}"
      user: "{{ bmc_user }}"
    bmc_password: "{{ bmc_password }}"
    package: /srv/firmware/nvfw_HGX-H100x8_0013_240410.1.0_prod-signed.fwpkg
    checksum: sha256:3b8f2b5c2d0c6f5e9a1d4e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b
  delegate_to: localhost
  register: gpu_fw

- name: Record the update in the node's state file
  gpufleet.lifecycle.nvfwupd:
    state: record
    record: "{{ gpu_fw.state_record }}"

- name: Run NVIDIA's nvfwupd.py from its virtualenv
  gpufleet.lifecycle.nvfwupd:
    bmc: {address: 10.0.5.21, user: admin}
    bmc_password: "{{ vault_bmc_password }}"
    package: /srv/firmware/hgx.fwpkg
    checksum: "{{ hgx_fwpkg_sha256 }}"
    nvfwupd_path: /opt/nvfwupd/nvfwupd.py
    nvfwupd_interpreter: /opt/nvfwupd/venv/bin/python
  delegate_to: mgmt01
"""

RETURN = r"""
plan:
  description: Per component the package covers (and O(targets) selects) what is installed and staged, the package's version, the action
    (V(none), V(activate) when the package's version is staged, V(update), V(downgrade)) and the reset that activates it.
  returned: when a package was read
  type: list
  elements: dict
  sample: [{component: HGX_FW_GPU_SXM_1, installed: 96.00.A5.00.01, staged: null, package: 96.00.AF.00.01, action: update, activation: gpu_reset}]
activation_required:
  description: The resets that activate the staged firmware, reduced to what is needed (V(ac_power_cycle) covers every other,
    V(reboot) covers V(gpu_reset)); V(bmc_reset) is the HMC's own reset. Empty when nothing waits.
  returned: success
  type: list
  elements: str
  sample: [gpu_reset, bmc_reset]
before:
  description: Installed version per planned component before the update.
  returned: with O(state=present)
  type: dict
  sample: {HGX_FW_GPU_SXM_1: 96.00.A5.00.01}
after:
  description: Installed version per planned component after the update (staged firmware shows only after its activation).
  returned: with O(state=present)
  type: dict
  sample: {HGX_FW_GPU_SXM_1: 96.00.A5.00.01}
staged:
  description: Staged version per planned component after the update.
  returned: when firmware was flashed
  type: dict
  sample: {HGX_FW_GPU_SXM_1: 96.00.AF.00.01}
finished:
  description: Components flashed (staged or installed at the package's version).
  returned: when firmware was flashed, also on failure
  type: list
  elements: str
  sample: [HGX_FW_BMC_0]
unfinished:
  description: Components not flashed.
  returned: when firmware was flashed, also on failure
  type: list
  elements: str
  sample: [HGX_FW_GPU_SXM_1]
task_ids:
  description: The BMC's update task ids.
  returned: with O(state=present)
  type: list
  elements: str
  sample: ["0"]
force_update:
  description:
    - Whether ForceUpdate was enabled for a downgrade and checked off again afterwards (C(enabled), C(disabled_after)).
    - C(found_on) is what C(force_update status) said first; C(stale_record) that a killed earlier run had turned it on;
      C(turned_off) that this run turned that one off and checked it (null when not needed, or in check mode).
  returned: with O(state=present)
  type: dict
  sample: {enabled: true, disabled_after: true, found_on: false, stale_record: false, turned_off: null}
package_version:
  description: The package's version string.
  returned: with O(state=present)
  type: str
  sample: HGX-24.04-2
state_record:
  description:
    - What happened, for O(state=record) on the node (component, action, result V(ok), V(partial), V(failed) or V(planned),
      versions, finished and unfinished components).
    - C(task_ids) are the BMC's update tasks; C(task_result) is the last known status of the update (V(done), V(failed), V(running)
      when O(timeout) ran out, V(unknown) when nvfwupd's answer could not be read after C(update_fw) ran, null when no update ran).
  returned: with O(state=present), also on failure
  type: dict
  sample: {component: gpu_firmware, action: update, result: ok, package_version: HGX-24.04-2, finished: [HGX_FW_BMC_0], unfinished: [],
           task_ids: ["0"], task_result: done}
components:
  description: With O(state=query), every firmware component the BMC lists.
  returned: with O(state=query)
  type: list
  elements: dict
  sample: [{ap: HGX_FW_BMC_0, sys_version: HGX-22.10-1, pkg_version: null, staged_version: null, up_to_date: false}]
system:
  description: What nvfwupd reports about the system (model, part number, serial, packages).
  returned: with O(state=present) or O(state=query)
  type: dict
  sample: {model: NVIDIA HGX H100 80GB HBM3 8-GPU, packages: [HGX-24.04-2], error_code: 0}
commands_run:
  description: Number of nvfwupd calls.
  returned: with O(state=present) or O(state=query)
  type: int
  sample: 4
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.nvfwupd import SERVERTYPES, FirmwareUpdater
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._state import DEFAULT_PATH

ARGUMENT_SPEC = {
    "bmc": {
        "type": "dict",
        "options": {
            "address": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "password": {"type": "str", "no_log": True},  # the action plugin moves it to bmc_password
            "port": {"type": "int", "default": 443},
            "servertype": {"type": "str", "choices": list(SERVERTYPES), "default": "HGX"},
            "validate_certs": {"type": "bool", "default": True},
            "ca_path": {"type": "path"},
        },
    },
    "bmc_password": {"type": "str", "no_log": True},
    "package": {"type": "path"},
    "checksum": {"type": "str"},
    "targets": {"type": "list", "elements": "str", "default": []},
    "stage_only": {"type": "bool", "default": False},
    "state": {"type": "str", "choices": ["present", "query", "record"], "default": "present"},
    "allow_downgrade": {"type": "bool", "default": False},
    "timeout": {"type": "int", "default": 1800},
    "poll_interval": {"type": "int", "default": 5},
    "nvfwupd_path": {"type": "path"},
    "nvfwupd_interpreter": {"type": "path"},
    "record": {"type": "dict"},
    "state_file": {"type": "path", "default": DEFAULT_PATH},
    "rollout_id": {"type": "str"},
}


def bmc_with_password(bmc, bmc_password):
    """``(bmc with its password, None)`` - bmc_password, or the old bmc.password - as _firmware reads it, or ``(None,
    message)`` when it has none or two. The message never holds the value."""
    if bmc is None:
        return None, None
    if bmc_password is not None and bmc.get("password") is not None:
        return None, "bmc_password and bmc.password are both given: give the BMC password once, as bmc_password"
    password = bmc_password if bmc_password is not None else bmc.get("password")
    if password is None:
        return None, "bmc_password is missing: give the password of bmc.user"
    return dict(bmc, password=password), None


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ("bmc", "package")), ("state", "query", ("bmc",)), ("state", "record", ("record",))],
        supports_check_mode=True,
    )
    if module.params["state"] != "record":
        bmc, problem = bmc_with_password(module.params["bmc"], module.params["bmc_password"])
        if problem:
            module.fail_json(msg=problem)
        module.params["bmc"] = bmc  # _firmware reads bmc.password
    try:
        result = FirmwareUpdater(module).run()
    except (GpufleetError, ValueError) as exc:  # ValueError: a parser's ParseError
        module.fail_json(**fail_kwargs(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
