#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver
short_description: Install, upgrade, downgrade or remove the NVIDIA driver together with its fabric manager
version_added: 0.1.0
description:
  - Reads the driver on the node (C(/proc/driver/nvidia/version), C(modinfo nvidia) or the installed packages, C(nvidia-smi),
    C(nv-fabricmanager --version), C(systemctl is-active), NVSwitch presence), plans the change, returns the plan in check mode,
    acts, reads the node again and returns the new state.
  - Before it changes anything it records the driver that works now as the last known good version in the node state file
    O(state_file), with a history entry, so that a rollback has something to return to.
  - Acting is the same for both methods. The runfile is verified (sha256) first; GPU processes are handled per O(gpu_processes);
    C(nvidia-persistenced), C(nvidia-fabricmanager) and C(nvidia-dcgm) are stopped when running and started again on every exit path;
    the modules are unloaded in dependency order (C(nvidia_drm), C(nvidia_modeset), C(nvidia_uvm), C(nvidia_peermem), C(nvidia));
    the driver and the fabric manager are installed; the modules are loaded again, or RV(reboot_required) says that the node must reboot;
    C(nvidia-smi) must then answer with the new version and, on NVSwitch systems, the fabric manager must equal the driver.
  - On a failure the previous driver is still installed and loaded (the old modules are loaded again), or the failure result's
    C(node_state) says exactly what the node is left with.
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
      - The diff is the driver version, kernel module flavor and (when managed) fabric manager and IMEX versions before and after.
  idempotent:
    support: full
options:
  version:
    description: The driver version, for example V(550.90.07). Required with O(state=present).
    type: str
  state:
    description: V(present) installs O(version); V(absent) removes the driver.
    type: str
    choices: [present, absent]
    default: present
  method:
    description:
      - V(runfile) runs NVIDIA's C(.run) installer from O(source); the fabric manager then comes from the distribution package
        C(nvidia-fabricmanager-<branch>) (apt) or C(nvidia-fabricmanager) (dnf) at the same version.
      - V(package) installs the driver and the fabric manager packages of NVIDIA's CUDA repository at the exact version and holds them
        (C(apt-mark hold), C(dnf versionlock)) so that unattended upgrades cannot move them.
    type: str
    choices: [runfile, package]
    default: runfile
  source:
    description:
      - Path on the node of C(NVIDIA-Linux-x86_64-<version>.run) (absolute), or an C(https://) URL to download it from.
        Required with O(method=runfile) unless O(presigned_url) is given.
      - A path is copied into a private folder of the module (mode 0700) and the sha256 is checked on that copy, which is
        what the installer runs; the file at the path may be swapped after the check (a folder a job user can write), the copy cannot.
      - A URL must be C(https://); C(http://) and C(ftp://) are refused. Redirects are followed only to C(https://) URLs.
      - A URL with a user name or password (C(user:password@host)) or with a signature, credential or token in its query
        (C(X-Amz-Signature), C(X-Amz-Credential), C(sig), C(token)...) is refused before anything runs, since this option is
        logged with the task's arguments. Use O(url_username) and O(url_password), O(url_headers), or O(presigned_url), which are C(no_log).
    type: str
  presigned_url:
    description:
      - An C(https://) URL of the runfile that carries its own credentials (an S3 or GCS presigned URL, an Azure SAS URL),
        instead of O(source). It is C(no_log); messages show it without its query string. Any other scheme is refused.
    type: str
  url_username:
    description:
      - User name for the download when O(source) is a URL, sent with the first request (HTTP basic authentication).
      - O(url_username), O(url_password) and O(url_headers) are sent only over C(https://), and only to the scheme, host and port of
        the URL given. A redirect to another host or port (a CDN, an object store) is followed without them; a redirect to
        anything but C(https://) is refused before anything is sent there.
    type: str
  url_password:
    description: Password for the download when O(source) is a URL (with O(url_username)).
    type: str
  url_headers:
    description:
      - HTTP headers sent with the download, for example an C(Authorization) header with a bearer token, or a repository's API key header.
      - The option is C(no_log), so its values never appear in output or logs. Names are HTTP header names, values one line of text.
    type: dict
  checksum:
    description:
      - The sha256 of the runfile, as V(sha256:<hex>) or bare hex. Required with O(method=runfile). A mismatch fails before anything changes.
    type: str
  kernel_module:
    description: The open kernel modules (required for Hopper with some features, Blackwell and later) or the proprietary ones.
    type: str
    choices: [open, proprietary]
    default: open
  dkms:
    description:
      - Register the runfile's kernel module with DKMS so that it is rebuilt for new kernels. The packages always use DKMS.
    type: bool
    default: true
  kernel_source_path:
    description: Kernel sources to build against (runfile C(--kernel-source-path)); the installer finds them for C(uname -r) when not set.
    type: path
  fabricmanager:
    description:
      - V(auto) makes the fabric manager follow the driver when the node has NVSwitches and leaves it alone otherwise;
        V(present) always installs it at the driver version; V(absent) removes it; V(skip) leaves it alone.
    type: str
    choices: [auto, present, absent, skip]
    default: auto
  imex:
    description:
      - IMEX (C(nvidia-imex)) of a GB200 / GB300 NVL72 compute tray, which refuses to start at any version but the loaded driver's.
      - V(auto) makes IMEX follow the driver on a node where C(nvidia-imex) is installed and leaves other nodes alone;
        V(present) always installs it at the driver version; V(absent) removes it; V(skip) leaves it alone.
      - IMEX is installed at exactly the driver's version (C(nvidia-imex-<branch>) before R580, C(nvidia-imex) from R580 on,
        release O(package_release)) and held, for both methods. When the repositories do not offer that exact version the
        module fails before anything changes, in check mode too.
      - C(nvidia-imex) is stopped before the driver changes and is not started again after a successful change, since it can only
        start once the new driver is loaded, and the IMEX domain is whole only when every tray of it runs the same version.
        The nvidia_driver role's verify entry point starts it and waits for the domain. After a failed change the previous
        driver is loaded again and IMEX is started again.
    type: str
    choices: [auto, present, absent, skip]
    default: auto
    version_added: 0.2.0
  module_signing_key:
    description:
      - The private key (PEM, not encrypted) that signs the driver's kernel modules, for a node that enforces UEFI Secure Boot;
        give it from a vault. It is C(no_log) and is never shown in a result, a message or the node state file.
      - It is written on the node only for the install, into a new private folder of the module's temporary folder (mode 0700,
        the file 0600), and removed (overwritten, then deleted) with the DKMS configuration that names it when the install
        ends, whether it succeeded or failed.
      - The runfile gets C(--module-signing-secret-key) and C(--module-signing-public-key); where DKMS builds the modules (the
        packages, or the runfile with O(dkms)) a drop-in C(/etc/dkms/framework.conf.d/gpufleet-module-signing.conf) sets
        DKMS's C(mok_signing_key) and C(mok_certificate) for the install only (DKMS 3.0 or later reads that folder).
      - Requires O(module_signing_certificate).
    type: str
    version_added: 0.2.0
  module_signing_certificate:
    description:
      - The X.509 certificate of O(module_signing_key) (PEM, or base64 of its DER). On a node that enforces Secure Boot it must be
        enrolled as a Machine Owner Key, C(mokutil --list-enrolled) must list its SHA1 fingerprint, else the module refuses
        before anything changes and says how to enroll it (C(mokutil --import <cert.der>), then a reboot through the MOK manager).
      - After the new modules are loaded, every NVIDIA module (C(nvidia), C(nvidia_uvm), C(nvidia_modeset), C(nvidia_drm), and
        C(nvidia_peermem) where the driver built it) must be signed by this certificate (C(modinfo) C(signer) and C(sig_key)).
    type: str
    version_added: 0.2.0
  module_signing_certificate_sha1:
    description:
      - The SHA1 fingerprint of the certificate the fleet signs its modules with (the BOM's C(stack.secure_boot.key_sha1)),
        40 hex digits, with or without colons. A O(module_signing_certificate) with another fingerprint is refused before
        anything changes.
    type: str
    version_added: 0.2.0
  secure_boot:
    description:
      - What the BOM says about UEFI Secure Boot on this node (C(mokutil --sb-state)). V(any) follows the node; V(enforced)
        refuses a node where it is not enforced; V(off) refuses a node that enforces it.
      - On a node that enforces Secure Boot a driver install without O(module_signing_key) is refused before anything changes,
        whatever this says, since the kernel would refuse the unsigned C(nvidia.ko) at its next load (the load fails with C(Key was rejected by service)).
        A load refused that way after the install fails the module, so that the role rolls back.
    type: str
    choices: [any, enforced, "off"]
    default: any
    version_added: 0.2.0
  persistenced:
    description: Start C(nvidia-persistenced) after the driver changed, even when it was not running before.
    type: bool
    default: true
  allow_downgrade:
    description: Allow installing a version older than the installed one.
    type: bool
    default: false
  gpu_processes:
    description:
      - What to do when processes use the GPUs. V(refuse) fails and changes nothing; V(wait) polls until they end, at most O(timeout) seconds;
        V(kill) sends them SIGTERM, then SIGKILL after 10 seconds.
      - V(kill) ends whatever runs there, training jobs included, without a checkpoint. Drain the node instead where you can.
    type: str
    choices: [refuse, wait, kill]
    default: refuse
  busy_modules:
    description:
      - What to do when the nvidia kernel modules cannot be unloaded (C(rmmod) answers that a module is in use; something outside
        nvidia-smi's view holds C(/dev/nvidia*), such as a display server or a process in another container).
      - V(refuse) fails, installs nothing and leaves the previous driver loaded (the units stopped before are started again).
      - V(reboot) (O(method=package) only) installs the packages beside the loaded modules and returns RV(reboot_required=true);
        the libraries of the running driver are replaced under whatever holds the GPU, and the new driver is active after a reboot.
        The runfile installer cannot install beside loaded modules, so O(method=runfile) always refuses.
    type: str
    choices: [refuse, reboot]
    default: refuse
  timeout:
    description:
      - Seconds allowed for the installer or the package manager, and for O(gpu_processes=wait); from V(1) to V(86400).
      - The commands that only read the node (C(nvidia-smi), C(modinfo), C(systemctl)) have a limit of their own (120 seconds),
        so a hung GPU makes the module fail with a message that says so instead of hanging the task.
    type: int
    default: 900
  package_manager:
    description: The package manager; V(auto) picks it from the distribution.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  package_release:
    description:
      - The package release appended to the version, V(1) in NVIDIA's repositories (C(nvidia-driver-550-open=550.90.07-1),
        C(nvidia-fabricmanager-550.90.07-1)). Some Ubuntu builds use V(0ubuntu1). Letters, digits and C(.+~_) only.
    type: str
    default: "1"
  state_file:
    description:
      - The node state file (JSON, readable as C(ansible_local.gpufleet)).
      - It is read, changed and written under an exclusive lock on C(<state_file>.lock) (bounded wait), and the
        previous document is kept as C(<state_file>.prev).
      - A damaged file (empty, not JSON, wrong types) fails the module before anything is changed, with a message
        that says how to repair it; it is never reset silently.
    type: path
    default: /etc/ansible/facts.d/gpufleet.fact
  record_last_known_good:
    description: Record the working driver as last known good before changing it. The rollback entry point of the role turns this off.
    type: bool
    default: true
  rollout_id:
    description: The rollout this change belongs to, written into the history entry. One line of at most 128 printable characters.
    type: str
notes:
  - Every option is checked before the first command runs; a bad value fails with a message naming the option, and nothing is changed.
  - The runfile does not contain the fabric manager. On NVSwitch systems the module installs the package at the same version;
    when it cannot, it fails before touching the driver (set O(fabricmanager=skip) to manage it yourself).
  - The modules are unloaded with C(rmmod), never forced. When they cannot be unloaded the module fails and changes nothing, unless
    O(busy_modules=reboot) with O(method=package), which installs the packages and returns RV(reboot_required=true).
  - When nvidia-smi cannot list the GPU processes although a driver is loaded (a GPU fallen off the bus, an NVML error), the module
    fails and changes nothing, whatever O(gpu_processes) says, since it cannot tell that no job runs there.
seealso:
  - module: gpufleet.lifecycle.gpu_facts
  - name: NVIDIA driver installation guide
    description: Package names and repositories the package method follows.
    link: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
"""

EXAMPLES = r"""
- name: Upgrade to the BOM driver from a verified runfile
  gpufleet.lifecycle.nvidia_driver:
    version: 550.90.07
    source: /var/cache/gpufleet/NVIDIA-Linux-x86_64-550.90.07.run
    checksum: sha256:1a9c4b0e8f2d3c5b7a6e9f0d1c2b3a4958675a4b3c2d1e0f9a8b7c6d5e4f3a2b
  register: driver

- name: Install from the CUDA repository, held, open modules, waiting up to 10 minutes for GPU jobs to end
  gpufleet.lifecycle.nvidia_driver:
    version: 570.124.06
    method: package
    gpu_processes: wait
    timeout: 600
    busy_modules: reboot  # a display server holds the GPU: install beside it and reboot (see the next task)

- name: Download the runfile with a token header
  gpufleet.lifecycle.nvidia_driver:
    version: 550.90.07
    source: https://artifacts.example.com/nvidia/NVIDIA-Linux-x86_64-550.90.07.run
    checksum: sha256:1a9c4b0e8f2d3c5b7a6e9f0d1c2b3a4958675a4b3c2d1e0f9a8b7c6d5e4f3a2b
    url_headers:
      Authorization: "Bearer {{ artifact_token }}"

- name: Download the runfile from a presigned S3 URL (no_log, never logged with the task)
  gpufleet.lifecycle.nvidia_driver:
    version: 550.90.07
    presigned_url: "{{ runfile_presigned_url }}"
    checksum: sha256:1a9c4b0e8f2d3c5b7a6e9f0d1c2b3a4958675a4b3c2d1e0f9a8b7c6d5e4f3a2b

- name: Download the runfile with credentials (never written into the URL)
  gpufleet.lifecycle.nvidia_driver:
    version: 550.90.07
    source: https://artifacts.example.com/nvidia/NVIDIA-Linux-x86_64-550.90.07.run
    checksum: sha256:1a9c4b0e8f2d3c5b7a6e9f0d1c2b3a4958675a4b3c2d1e0f9a8b7c6d5e4f3a2b
    url_username: gpufleet
    url_password: "{{ artifact_password }}"

- name: Upgrade a node that enforces Secure Boot, its modules signed with an enrolled MOK (the key from a vault)
  gpufleet.lifecycle.nvidia_driver:
    version: 550.90.07
    source: /var/cache/gpufleet/NVIDIA-Linux-x86_64-550.90.07.run
    checksum: sha256:1a9c4b0e8f2d3c5b7a6e9f0d1c2b3a4958675a4b3c2d1e0f9a8b7c6d5e4f3a2b
    secure_boot: enforced
    module_signing_key: "{{ vault_module_signing_key }}"
    module_signing_certificate: "{{ lookup('ansible.builtin.file', 'files/module-signing.pem') }}"

- name: Reboot when the modules could not be reloaded in place
  ansible.builtin.reboot:
  when: driver.reboot_required
"""

RETURN = r"""
plan:
  description: What the module did (or would do in check mode).
  returned: always
  type: dict
  sample:
    driver: {action: upgrade, before: 535.161.08, after: 550.90.07, kernel_module_before: open, kernel_module_after: open}
    fabricmanager: {action: upgrade, before: 535.161.08, after: 550.90.07, managed: true}
    imex: {action: none, before: null, after: null, package: null, managed: false}
    changed: true
reboot_required:
  description:
    - True when the new modules could not be loaded in place; the node runs the new driver after a reboot.
    - In check mode it is predicted from what the module reads. It is true when the plan is to activate an installed driver that is not
      the loaded one, or to change the driver while a GPU has fallen off the bus. Whether C(rmmod) or C(modprobe) will succeed
      is known only by trying, so a real run can still return true where check mode said false.
  returned: always
  type: bool
  sample: false
before:
  description: The driver, fabric manager, services and NVSwitch presence read before acting.
  returned: always
  type: dict
  sample:
    driver: {installed_version: 535.161.08, loaded_version: 535.161.08, flavor: open, nvidia_smi: ok, nvidia_smi_version: 535.161.08, held: null}
    fabricmanager: {installed: true, version: 535.161.08}
    services: {nvidia-persistenced: active, nvidia-fabricmanager: active, nvidia-dcgm: active}
    nvswitch: true
    kernel: 5.15.0-119-generic
after:
  description: The same, read again after acting (equal to RV(before) when nothing changed or in check mode).
  returned: always
  type: dict
  sample:
    driver: {installed_version: 550.90.07, loaded_version: 550.90.07, flavor: open, nvidia_smi: ok, nvidia_smi_version: 550.90.07, held: null}
    fabricmanager: {installed: true, version: 550.90.07}
gpu_processes_killed:
  description: The GPU processes ended with O(gpu_processes=kill).
  returned: when the driver changed
  type: list
  elements: dict
  sample: [{pid: 4242, process_name: python3, gpu_uuid: GPU-5d3c0b8e-1a2b-3c4d-5e6f-708192a3b4c5, used_memory: 30712}]
runfile:
  description:
    - The runfile that was verified and installed (O(method=runfile)). The installer runs a private copy made in the
      module's temporary folder (mode 0700), the copy whose sha256 was checked, never the file at O(source).
    - C(source) is O(source), or the URL given without its user, password, query and fragment; C(url) is the URL the file
      came from after C(redirects) redirects, shown the same way.
  returned: when the runfile method changed the driver
  type: dict
  sample: {source: https://artifacts.example.com/nvidia/NVIDIA-Linux-x86_64-550.90.07.run, url: https://cdn.example.com/NVIDIA-Linux-x86_64-550.90.07.run,
           redirects: 1, sha256: 1a9c4b0e8f2d3c5b7a6e9f0d1c2b3a4958675a4b3c2d1e0f9a8b7c6d5e4f3a2b}
module_signing:
  description:
    - Secure Boot and the modules' signatures. C(secure_boot) is the node's state as C(mokutil --sb-state) says it (null when
      nothing was read), C(signed) whether the install signed the modules, C(certificate_sha1) and C(signer) name the
      certificate of O(module_signing_certificate) (never the key).
    - C(problems) lists the NVIDIA modules not signed by that certificate; it is filled when nothing is to change, a key is
      given and the node enforces Secure Boot (the role's verify fails on it), and in the failure of an install whose modules
      came out unsigned.
  returned: always
  type: dict
  sample: {secure_boot: enforced, enforcing: true, signed: true, certificate_sha1: 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567,
           signer: gpufleet module signing key, problems: []}
commands_run:
  description: Number of processes the module started.
  returned: always
  type: int
  sample: 14
"""

from ansible.module_utils import basic
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.manager import DriverManager
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.plan import secret_options
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._state import DEFAULT_PATH

ARGUMENT_SPEC = {
    "version": {"type": "str"},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "method": {"type": "str", "choices": ["runfile", "package"], "default": "runfile"},
    "source": {"type": "str"},
    "presigned_url": {"type": "str", "no_log": True},
    "url_username": {"type": "str"},
    "url_password": {"type": "str", "no_log": True},
    "url_headers": {"type": "dict", "no_log": True},
    "checksum": {"type": "str"},
    "kernel_module": {"type": "str", "choices": ["open", "proprietary"], "default": "open"},
    "dkms": {"type": "bool", "default": True},
    "kernel_source_path": {"type": "path"},
    "fabricmanager": {"type": "str", "choices": ["auto", "present", "absent", "skip"], "default": "auto"},
    "imex": {"type": "str", "choices": ["auto", "present", "absent", "skip"], "default": "auto"},
    "module_signing_key": {"type": "str", "no_log": True},
    "module_signing_certificate": {"type": "str"},
    "module_signing_certificate_sha1": {"type": "str"},
    "secure_boot": {"type": "str", "choices": ["any", "enforced", "off"], "default": "any"},
    "persistenced": {"type": "bool", "default": True},
    "allow_downgrade": {"type": "bool", "default": False},
    "gpu_processes": {"type": "str", "choices": ["refuse", "wait", "kill"], "default": "refuse"},
    "busy_modules": {"type": "str", "choices": ["refuse", "reboot"], "default": "refuse"},
    "timeout": {"type": "int", "default": 900},
    "package_manager": {"type": "str", "choices": ["auto", "apt", "dnf"], "default": "auto"},
    "package_release": {"type": "str", "default": "1"},
    "state_file": {"type": "path", "default": DEFAULT_PATH},
    "record_last_known_good": {"type": "bool", "default": True},
    "rollout_id": {"type": "str"},
}


def argument_spec():
    """ARGUMENT_SPEC, with ``source`` no_log when it carries a secret: AnsibleModule logs its invocation before any check of ours."""
    try:
        hidden = secret_options(basic._load_params())
    except Exception:  # pylint: disable=broad-except  # unreadable arguments: AnsibleModule reports that itself
        hidden = []
    return {name: dict(spec, no_log=True) if name in hidden else spec for name, spec in ARGUMENT_SPEC.items()}


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("state", "present", ("version",))],
        mutually_exclusive=[("source", "presigned_url")],
        supports_check_mode=True,
    )
    try:
        result = DriverManager(module).run()
    except (GpufleetError, ValueError) as exc:  # ValueError: a parser's ParseError, a version that does not read
        module.fail_json(**fail_kwargs(exc))
    for note in result.pop("warnings_text", []):
        module.warn(note)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
