#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: ofed
short_description: Install an exact DOCA-OFED / MLNX_OFED release without its NIC firmware updater, and reload the RDMA stack
version_added: 0.2.0
description:
  - Reads the installed release with C(ofed_info -s) (C(MLNX_OFED_LINUX-<version>) is V(mlnx-ofed), C(OFED-internal-<version>)
    is V(doca-ofed); no C(ofed_info) is the distribution's inbox stack) and installs O(flavor) O(version) when it differs.
  - The OFED installer never touches NIC firmware. C(mlnxofedinstall) is always run with C(--without-fw-update) (without it, it
    burns every adapter older than its bundled image); an option in O(installer_args) that names firmware is refused. With
    O(method=package) the packages are installed with C(mlnx-fw-updater) kept out (apt's C(mlnx-fw-updater-), dnf's
    C(--exclude)), and an C(mlnx-fw-updater) left by an earlier install is removed. C(RUN_FW_UPDATER_ONBOOT=yes) in
    C(/etc/infiniband/openib.conf) is set to C(no). NIC firmware stays with the C(nic_firmware) role.
  - Where C(mlxfwmanager) is installed, the NICs' flashed firmware is read before and after the install; any change fails the
    task and names the NICs.
  - The sha256 of O(source) is verified before anything changes; a mismatch fails and changes nothing.
  - Before it changes anything it records the installed release as the last known good C(ofed) in the node state file
    O(state_file) (not for the inbox stack); every change appends a history entry.
  - The new stack is loaded with C(openibd restart), after unloading C(nvidia_peermem) (it holds C(ib_core)). While opensm runs
    (C(opensmd) or C(opensm) active) or nvme-rdma holds the stack (C(nvme_rdma), C(nvmet_rdma) loaded, C(mlx_compat) in use by
    C(nvme_*)) the restart is not tried (openibd refuses, or fails half-way); RV(reboot_required) is true and the activation is a
    reboot. A restart that fails for another reason leaves the activation to a reboot too.
  - C(nvidia_peermem) is built against OFED's symbols; after an OFED change it fails to load (C(Unknown symbol
    ib_register_peer_memory_client)) until it is rebuilt. The module rebuilds the NVIDIA DKMS modules for the running kernel
    (C(dkms build) and C(dkms install -m nvidia -v VERSION -k KERNEL --force)) and loads C(nvidia_peermem) again; a driver
    installed without DKMS cannot be rebuilt here and is refused before anything changes (see O(peermem)).
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details:
      - Check mode reads the node and returns the plan; RV(reboot_required) is then the predicted activation.
  diff_mode:
    support: full
    details:
      - The diff is the OFED flavour and release, before and after.
  idempotent:
    support: full
options:
  flavor:
    description:
      - The OFED flavour of the bill of materials. V(doca-ofed) prints C(OFED-internal-<version>) in C(ofed_info -s),
        V(mlnx-ofed) prints C(MLNX_OFED_LINUX-<version>).
      - V(inbox) is refused (the distribution's own stack is not installed by this module).
    type: str
    required: true
  version:
    description: The exact release as C(ofed_info -s) prints it after the name, for example V(24.10-1.1.4.0) or V(24.10-1.1.4.0.200).
    type: str
    required: true
  method:
    description:
      - V(installer) extracts the bundle O(source) (C(MLNX_OFED_LINUX-<version>-<distro>-<arch>.tgz)) into O(work_dir) and runs
        its C(mlnxofedinstall --without-fw-update --force).
      - V(package) installs O(packages) with apt or dnf from a configured repository, or from DOCA's local repository package
        O(source) (C(doca-host_<version>.deb) or C(.rpm)) installed first.
    type: str
    choices: [installer, package]
    default: installer
  source:
    description:
      - Absolute path on the node of the bundle (O(method=installer), required) or of the local repository package
        (O(method=package), optional). The ofed role downloads a URL there first.
    type: path
  checksum:
    description: The sha256 of O(source), as V(sha256:<hex>) or bare hex; required with O(source).
    type: str
  packages:
    description:
      - The packages that install the stack with O(method=package). Default V([doca-ofed]) for V(doca-ofed) and V([mlnx-ofed-all])
        for V(mlnx-ofed). C(mlnx-fw-updater) is refused.
    type: list
    elements: str
  package_manager:
    description: The package manager of O(method=package); V(auto) takes apt-get where it is installed, else dnf.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  installer_args:
    description:
      - More options of C(mlnxofedinstall), each C(--name) or C(--name=value), for example V(--add-kernel-support) or
        V(--skip-distro-check). An option that names firmware (C(--fw-image-dir), C(--force-fw-update)...) is refused.
    type: list
    elements: str
    default: []
  reload:
    description:
      - V(auto) reloads the new stack with C(openibd restart) unless opensm or nvme-rdma holds it; V(reboot) never reloads in place
        (RV(reboot_required) is true after a change).
    type: str
    choices: [auto, reboot]
    default: auto
  peermem:
    description:
      - V(auto) rebuilds and reloads C(nvidia_peermem) after an OFED change when the driver has it for the running kernel.
      - V(required) also loads it when it is not loaded and nothing else changes.
      - V(skip) leaves it alone (for example when the driver is reinstalled after OFED in the same rollout).
    type: str
    choices: [auto, required, skip]
    default: auto
  allow_downgrade:
    description: Allow installing a release older than the installed one (the ofed role's rollback sets it).
    type: bool
    default: false
  work_dir:
    description: The folder the bundle is extracted into (one sub-folder per release).
    type: path
    default: /var/cache/gpufleet/ofed
  timeout:
    description: Seconds the installer or the package manager may run.
    type: int
    default: 3600
  state_file:
    description: The node state file (JSON) that records the last known good OFED and the history.
    type: path
    default: /etc/ansible/facts.d/gpufleet.fact
  record_last_known_good:
    description: Record the installed release as the last known good C(ofed) before changing it (the rollback sets V(false)).
    type: bool
    default: true
  rollout_id:
    description: The rollout this change belongs to, recorded in the history.
    type: str
  module_signing_key:
    description:
      - The private key (PEM, not encrypted) that signs the NVIDIA modules DKMS rebuilds for C(nvidia_peermem) (O(peermem)), for
        a node that enforces UEFI Secure Boot; the fleet's key, as M(gpufleet.lifecycle.nvidia_driver) takes it. Give it from a vault;
        it is C(no_log) and never shown in a result, a message or the node state file.
      - C(dkms install --force) reinstalls every module of the driver, C(nvidia.ko) too, signed with the pair of DKMS's
        configuration, or a pair DKMS generates that nobody enrolled. For the rebuild only, the key and its certificate are written
        in a new private folder of the module's temporary folder (0700, the key 0600) and a drop-in
        C(/etc/dkms/framework.conf.d/gpufleet-module-signing.conf) names them; both are removed (the key overwritten first) when
        the rebuild ends, whether it succeeded or failed.
      - On a node that enforces Secure Boot a rebuild without this key is refused before anything changes, since the kernel would refuse
        the modules signed by DKMS's own key (C(Key was rejected by service)), C(nvidia_peermem) at once and C(nvidia) at the next boot.
      - Requires O(module_signing_certificate).
    type: str
  module_signing_certificate:
    description:
      - The X.509 certificate of O(module_signing_key) (PEM, or base64 of its DER). On a node that enforces Secure Boot it must be
        enrolled (C(mokutil --list-enrolled) lists its SHA1), else the module refuses before anything changes and says how to enroll
        it. After the rebuild every NVIDIA module loaded must be signed by it (C(modinfo) C(signer) and C(sig_key)).
    type: str
  module_signing_certificate_sha1:
    description:
      - The SHA1 fingerprint of the fleet's module-signing certificate (the BOM's C(stack.secure_boot.key_sha1)), 40 hex digits,
        with or without colons. Another O(module_signing_certificate) is refused before anything changes.
    type: str
  secure_boot:
    description:
      - What the BOM says about UEFI Secure Boot on the node, read with C(mokutil --sb-state) where the NVIDIA modules are rebuilt.
        V(any) follows the node; V(enforced) refuses a node where it is not enforced; V(off) refuses a node that enforces it.
    type: str
    choices: [any, enforced, "off"]
    default: any
notes:
  - Drain the node first (the rollout does); reloading the stack stops every RDMA user on it.
seealso:
  - module: gpufleet.lifecycle.mlxfw
  - module: gpufleet.lifecycle.gpu_facts
"""

EXAMPLES = r"""
- name: Install DOCA-OFED 24.10-1.1.4.0.200 from the configured DOCA repository
  gpufleet.lifecycle.ofed:
    flavor: doca-ofed
    version: 24.10-1.1.4.0.200
    method: package

- name: Install MLNX_OFED 23.10-1.1.9.0 from its bundle (the firmware updater is never run)
  gpufleet.lifecycle.ofed:
    flavor: mlnx-ofed
    version: 23.10-1.1.9.0
    source: /var/cache/gpufleet/ofed/MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu22.04-x86_64.tgz
    checksum: sha256:5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592
    installer_args: [--add-kernel-support]
  register: ofed

- name: Reboot when the stack could not be reloaded in place
  ansible.builtin.reboot:
  when: ofed.reboot_required
"""

RETURN = r"""
plan:
  description: What the module does (or would do in check mode).
  returned: always
  type: dict
  contains:
    action:
      description: V(none), V(install) (over the inbox stack), V(upgrade), V(downgrade) or V(replace) (another flavour).
      type: str
    before:
      description: The flavour and version before.
      type: dict
    after:
      description: The flavour and version after.
      type: dict
    fw_updater:
      description: What is done about the firmware updater (V(disable_onboot), V(remove)).
      type: list
      elements: str
    reload:
      description: V(restart) (C(openibd restart)), V(reboot) (left to the caller) or V(none).
      type: str
    holders:
      description: What holds the RDMA stack (opensm, nvme-rdma) so that it is not restarted in place.
      type: list
      elements: str
    peermem:
      description: V(none), V(load), V(rebuild) (DKMS, then load) or V(skip).
      type: str
  sample:
    action: upgrade
    before: {flavor: doca-ofed, version: 24.04-0.6.6}
    after: {flavor: doca-ofed, version: 24.10-1.1.4.0.200}
    fw_updater: []
    reload: restart
    holders: []
    peermem: rebuild
before:
  description: What was read before (ofed, kernel, driver, peermem, firmware updater, opensm units, loaded modules).
  returned: always
  type: dict
after:
  description: What was read after the change (equal to RV(before) when nothing changed or in check mode).
  returned: always
  type: dict
reboot_required:
  description: True when the new stack is installed but not loaded (opensm or nvme-rdma held it, O(reload=reboot), or openibd failed).
  returned: always
  type: bool
  sample: false
activation:
  description: The activation the change still needs, for the rollout's one activation (V(none) or V(reboot)).
  returned: always
  type: str
  sample: none
nic_firmware:
  description: The NICs' flashed firmware by PCI address before and after the install (null where mlxfwmanager is not installed).
  returned: changed
  type: dict
  sample: {before: {"0000:17:00.0": 28.39.1002}, after: {"0000:17:00.0": 28.39.1002}}
install:
  description: What the install's firmware step did (V(skipped) or V(not_run) always) and the installer's log folder.
  returned: when the stack was installed
  type: dict
  sample: {firmware: skipped, logs_dir: /tmp/MLNX_OFED_LINUX.29047.logs}
sha256:
  description: The verified sha256 of O(source).
  returned: when O(source) was used
  type: str
module_signing:
  description:
    - Secure Boot and the signatures of the NVIDIA modules rebuilt by DKMS (as M(gpufleet.lifecycle.nvidia_driver) returns it);
      the node's state, whether the rebuild was signed with O(module_signing_certificate) (its SHA1 and issuer, never the key),
      and the signature problems found after the load.
  returned: when the plan rebuilds nvidia_peermem
  type: dict
  sample: {secure_boot: enforced, enforcing: true, signed: true, certificate_sha1: 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567,
           signer: Fleet module signing, problems: []}
notes:
  description: What the caller should know (the reason the activation is a reboot).
  returned: when there is any
  type: list
  elements: str
commands_run:
  description: Number of processes the module started.
  returned: always
  type: int
  sample: 9
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed.manager import OfedManager
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._state import DEFAULT_PATH

ARGUMENT_SPEC = {
    "flavor": {"type": "str", "required": True},
    "version": {"type": "str", "required": True},
    "method": {"type": "str", "choices": ["installer", "package"], "default": "installer"},
    "source": {"type": "path"},
    "checksum": {"type": "str"},
    "packages": {"type": "list", "elements": "str"},
    "package_manager": {"type": "str", "choices": ["auto", "apt", "dnf"], "default": "auto"},
    "installer_args": {"type": "list", "elements": "str", "default": []},
    "reload": {"type": "str", "choices": ["auto", "reboot"], "default": "auto"},
    "peermem": {"type": "str", "choices": ["auto", "required", "skip"], "default": "auto"},
    "allow_downgrade": {"type": "bool", "default": False},
    "work_dir": {"type": "path", "default": "/var/cache/gpufleet/ofed"},
    "timeout": {"type": "int", "default": 3600},
    "state_file": {"type": "path", "default": DEFAULT_PATH},
    "record_last_known_good": {"type": "bool", "default": True},
    "rollout_id": {"type": "str"},
    "module_signing_key": {"type": "str", "no_log": True},
    "module_signing_certificate": {"type": "str"},
    "module_signing_certificate_sha1": {"type": "str"},
    "secure_boot": {"type": "str", "choices": ["any", "enforced", "off"], "default": "any"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_together=[("source", "checksum"), ("module_signing_key", "module_signing_certificate")])
    try:
        result = OfedManager(module).run()
    except (GpufleetError, ValueError) as exc:  # ValueError: a parser's ParseError
        module.fail_json(**fail_kwargs(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
