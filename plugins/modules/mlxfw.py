#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: mlxfw
short_description: Update NVIDIA ConnectX / BlueField NIC firmware by PSID, verified, with the reset the device supports
version_added: 0.1.0
description:
  - Verifies the sha256 of every image (O(checksum), O(checksums)) before anything else, then reads each image with
    C(flint -i IMG q) (PSID and firmware version) and checks it with C(flint -i IMG v).
  - Each image is first copied into a private folder of the module (mode 0700) and the sha256 is computed on that copy,
    which is the file every C(flint) command reads and burns; the file at the image's path may be swapped after the check
    (a folder a job user can write), the copy cannot. The result names the image by its path.
  - Lists the NICs with C(mlxfwmanager --query --query-format XML) (NVIDIA MFT); where MFT is absent it queries each of
    O(devices) with C(flint -d DEV q) or C(mstflint -d DEV q). The firmware on flash and the one running come from
    C(flint -d DEV q).
  - Each device gets the image of its own PSID, burnt with C(flint -d DEV -i IMG -y burn). An image is never burnt onto a
    device of another PSID. A device the tool cannot open is reported with its status and never flashed.
  - Before it changes anything it records the running firmware as the last known good C(nic_firmware) in the node state
    file O(state_file); every change appends a history entry.
  - The new firmware runs after a reset or a reboot. With O(reset=mlxfwreset) the module asks C(mlxfwreset query) which
    levels the device supports and runs level 3 (driver restart and PCI reset) when it can; otherwise, or when the reset
    fails, RV(reboot_required) says that the node must reboot.
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
      - The diff is the running firmware version of each device that changes, before and after.
  idempotent:
    support: full
options:
  image:
    description:
      - Absolute path on the node of one firmware image (C(.bin)). Devices of its PSID are updated to it.
      - Exactly one of O(image), O(image_dir) and O(images) is required.
    type: path
  checksum:
    description: The sha256 of O(image), as V(sha256:<hex>) or bare hex. A mismatch fails before anything changes.
    type: str
  image_dir:
    description:
      - Absolute path on the node of a folder of images, one per PSID. Only the files named in O(checksums) are used.
    type: path
  checksums:
    description:
      - With O(image_dir), the sha256 of each image to use, as a dict of file name (in O(image_dir)) to V(sha256:<hex>) or bare hex.
    type: dict
  images:
    description:
      - The images as a list, each with its absolute C(path) on the node and its C(checksum) (V(sha256:<hex>) or bare hex), at most one per PSID.
    type: list
    elements: dict
    suboptions:
      path:
        description: Absolute path of the image on the node.
        type: path
        required: true
      checksum:
        description: The sha256 of the image.
        type: str
        required: true
  devices:
    description:
      - The devices to update, as mlxfwmanager names them (C(pci) in RV(devices), a PCI address such as V(0000:17:00.0) or an MST device
        such as V(/dev/mst/mt4129_pciconf0)). Every NIC when not set.
      - Required where mlxfwmanager (MFT) is not installed, since the NICs are then queried one by one with C(flint) or C(mstflint).
      - A named device that is not found, cannot be read, or has no image of its PSID fails the module before anything changes.
    type: list
    elements: str
  unmatched:
    description:
      - What to do with a device that has no image of its PSID. V(fail) refuses and changes nothing, naming the device and its PSID;
        V(skip) leaves it alone (it is reported with C(action=skip)).
    type: str
    choices: [fail, skip]
    default: fail
  allow_downgrade:
    description: Allow burning an image older than the firmware on flash.
    type: bool
    default: false
  reset:
    description:
      - How the new firmware is activated. V(none) only burns it (RV(reboot_required) is then true); V(mlxfwreset) runs
        C(mlxfwreset --device DEV --level 3 -y reset) when C(mlxfwreset query) lists level 3 as supported, and falls back to
        RV(reboot_required=true) otherwise or when the reset fails; V(reboot) leaves the reboot to the play (RV(reboot_required) is true),
        so that one reboot serves the NIC, GPU firmware and driver changes.
      - A level 3 reset restarts the NIC's driver and resets its PCI device, so its links go down for seconds. Do not use it on the NIC
        that carries the SSH session of the play.
      - With V(mlxfwreset), a device whose image is already on flash but not running yet is reset (C(action=activate)).
    type: str
    choices: [none, mlxfwreset, reboot]
    default: none
  timeout:
    description: Seconds one burn or one reset may take, from V(1) to V(86400). Queries have a limit of their own (120 seconds).
    type: int
    default: 1200
  state_file:
    description:
      - The node state file (JSON, readable as C(ansible_local.gpufleet)), changed under its lock.
      - A damaged file fails the module before anything is changed.
    type: path
    default: /etc/ansible/facts.d/gpufleet.fact
  record_last_known_good:
    description: Record the running firmware as last known good before changing it. The rollback entry point of the role turns this off.
    type: bool
    default: true
  rollout_id:
    description:
      - The rollout this change belongs to, written into the history entry.
      - Letters, digits, C(.), C(_) and C(-), 1 to 64 (the rule of every module that takes a rollout id).
    type: str
notes:
  - Every option is checked and every image's sha256 verified before the first command runs; a bad value fails with a message
    naming the option, and nothing is changed.
  - C(mlxfwmanager) can exit non-zero while printing a valid report; the module judges the XML, not the exit status.
seealso:
  - module: gpufleet.lifecycle.gpu_facts
  - name: NVIDIA MFT documentation (mlxfwmanager, flint, mlxfwreset)
    description: The tools this module runs.
    link: https://docs.nvidia.com/networking/display/mftv4300/
"""

EXAMPLES = r"""
- name: Update the ConnectX-7 cards to the BOM image and reset them in place
  gpufleet.lifecycle.mlxfw:
    image: /var/cache/gpufleet/fw-ConnectX7-rel-28_43_1014-MCX755106AS-HEA_Ax.bin
    checksum: sha256:5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592
    reset: mlxfwreset
  register: nic

- name: Update every NIC from a folder of images, one per PSID; the reboot comes later
  gpufleet.lifecycle.mlxfw:
    image_dir: /var/cache/gpufleet/nic
    checksums:
      fw-ConnectX7-rel-28_43_1014-MCX755106AS-HEA_Ax.bin: sha256:5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592
      fw-ConnectX6Dx-rel-22_43_1014-MCX623106AN-CDA_Ax.bin: sha256:7c211433f02071597741e6ff5a8ea34789abbf4378e6f8b1f5fbd8e1e7c5d2a1
    reset: reboot
  register: nic

- name: Reboot when the new firmware is not running yet
  ansible.builtin.reboot:
  when: nic.reboot_required
"""

RETURN = r"""
devices:
  description:
    - Every NIC the node reports, with what the module did (or would do in check mode).
    - C(action) is V(upgrade), V(downgrade), V(activate) (burnt before, reset now), V(none) (already at the image's version),
      V(skip) (not selected, or no image of its PSID with O(unmatched=skip)) or V(unreadable) (the tool could not open it; never flashed).
    - C(before) and C(after) are the firmware on flash, C(running_before) and C(running_after) the firmware running.
    - With O(reset=mlxfwreset), C(reset_levels) lists the levels C(mlxfwreset query) reports as supported, C(live_reset) whether level 3
      is among them, and C(reset_level) is set when the reset ran and completed.
  returned: always
  type: list
  elements: dict
  contains:
    pci:
      description: The device as mlxfwmanager names it (an MST device or a PCI address); what O(devices) and C(flint -d) take.
      type: str
    psid:
      description: The device's PSID (None for a device the tool could not open).
      type: str
    type:
      description: The device type, for example V(ConnectX7).
      type: str
    part_number:
      description: The board's part number.
      type: str
    status:
      description: The status mlxfwmanager printed for the device (the reason, for one it could not open).
      type: str
    action:
      description: What the module did or would do.
      type: str
      choices: [upgrade, downgrade, activate, none, skip, unreadable]
    reason:
      description: Why a device is skipped or unreadable.
      type: str
    image:
      description: The image of the device's PSID.
      type: str
    target:
      description: The firmware version in that image.
      type: str
    before:
      description: The firmware on flash before.
      type: str
    after:
      description: The firmware on flash after.
      type: str
    running_before:
      description: The firmware running before.
      type: str
    running_after:
      description: The firmware running after.
      type: str
    live_reset:
      description: Whether C(mlxfwreset query) lists level 3 for the device (with O(reset=mlxfwreset)).
      type: bool
    reset_levels:
      description: The reset levels C(mlxfwreset query) lists as supported.
      type: list
      elements: int
    reset_level:
      description: The level of the reset that ran and completed.
      type: int
  sample:
    - pci: /dev/mst/mt4129_pciconf0
      type: ConnectX7
      psid: MT_0000000834
      part_number: MCX755106AS-HEA_Ax
      status: Update required
      image: /var/cache/gpufleet/fw-ConnectX7-rel-28_43_1014-MCX755106AS-HEA_Ax.bin
      action: upgrade
      before: 28.40.1000
      after: 28.43.1014
      running_before: 28.40.1000
      running_after: 28.43.1014
      target: 28.43.1014
      live_reset: true
      reset_levels: [0, 3, 4]
      reset_level: 3
      reason: null
images:
  description: The images, each with the PSID and version flint reads in it, its sha256, and whether a device matched it.
  returned: always
  type: list
  elements: dict
  sample:
    - path: /var/cache/gpufleet/fw.bin
      psid: MT_0000000834
      version: 28.43.1014
      sha256: 5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592
      matched: true
reboot_required:
  description:
    - True when a device's new firmware is on flash but not running (O(reset=none), O(reset=reboot), no supported live reset level,
      or a reset that failed).
    - In check mode it is predicted; with O(reset=mlxfwreset) whether the reset works is known only by trying.
  returned: always
  type: bool
  sample: false
commands_run:
  description: Number of processes the module started.
  returned: always
  type: int
  sample: 7
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.mlx import NicFirmware
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._state import DEFAULT_PATH

ARGUMENT_SPEC = {
    "image": {"type": "path"},
    "checksum": {"type": "str"},
    "image_dir": {"type": "path"},
    "checksums": {"type": "dict"},
    "images": {"type": "list", "elements": "dict", "options": {"path": {"type": "path", "required": True}, "checksum": {"type": "str", "required": True}}},
    "devices": {"type": "list", "elements": "str"},
    "unmatched": {"type": "str", "choices": ["fail", "skip"], "default": "fail"},
    "allow_downgrade": {"type": "bool", "default": False},
    "reset": {"type": "str", "choices": ["none", "mlxfwreset", "reboot"], "default": "none"},
    "timeout": {"type": "int", "default": 1200},
    "state_file": {"type": "path", "default": DEFAULT_PATH},
    "record_last_known_good": {"type": "bool", "default": True},
    "rollout_id": {"type": "str"},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("image", "image_dir", "images"), ("checksum", "checksums")],
        required_one_of=[("image", "image_dir", "images")],
        supports_check_mode=True,
    )
    try:
        result = NicFirmware(module).run()
    except (GpufleetError, ValueError) as exc:  # ValueError: a parser's ParseError
        module.fail_json(**fail_kwargs(exc))
    for note in result.pop("warnings_text", []):
        module.warn(note)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
