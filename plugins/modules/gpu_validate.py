#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_validate
short_description: Validate a GPU node with a verdict per check, thresholds and a baseline
version_added: 0.1.0
description:
  - Runs health checks on an NVIDIA GPU node and returns, for each, a verdict (V(pass), V(fail), V(warn) or V(skip)) with the observed
    and the expected value, an overall RV(status), and fails the task when a check fails (unless O(fail_on=never)).
  - Built as the gate after a driver or firmware change, and as a health check on its own.
  - "Checks, grouped in levels (each level includes the one before):
    V(quick) (read-only, no load, seconds): C(gpu_count) (nvidia-smi answers and sees O(expected_gpu_count) GPUs),
    C(driver_version), C(fabricmanager) (version equals O(expected_fabricmanager_version) and the service runs, on NVSwitch systems),
    C(xid) (no critical Xid since boot or O(xid_since)), C(ecc) (no volatile double-bit error, no pending row remap or page retirement;
    ECC disabled warns),
    C(temperature), C(clocks_event_reasons) (no thermal or power slowdown), C(pcie_link) (at maximum generation and width),
    C(nvlink) (every link up, the same number on every GPU, and links at all on NVSwitch systems),
    and the stack around the driver, each skipped with its reason unless O(expected_stack) names what it checks:
    C(ib_ports) (every InfiniBand / RoCE port of the C(rdma_ports) of O(expected_stack) Active / LinkUp at its rate and link layer),
    C(peermem) (C(nvidia_peermem) loaded, at the loaded driver's version) and C(dcgm) (DCGM's host engine answers, at the
    BOM's version);
    V(standard) (minutes): adds C(cuda_smoke) and C(dcgm_diag) (C(dcgmi diag -r 2));
    V(full) (tens of minutes, loads every GPU): adds C(dcgmi diag -r 3), C(nccl_busbw) (nccl-tests C(all_reduce_perf) bus bandwidth)
    and C(gpu_burn) (every GPU of the node tested and OK)."
  - With O(baseline) (facts or a result from before the change), double-bit ECC counters, remapped rows, retired pages and Xid counts
    must not grow, and the NCCL bus bandwidth may not fall by more than O(baseline_busbw_tolerance_pct).
  - RV(measurements) holds the figures that the C(gpufleet.lifecycle.stragglers) filter compares across the fleet.
  - A check whose tool hangs (O(command_timeout) for the reads, O(timeout) for the long checks), fails, or prints something that
    cannot be read is a failed check whose message names the tool, the command and what to do; the other checks still run.
    An option outside its range fails the task before any command runs, with the range in the message.
  - The module only reads and measures; it changes nothing on the node. In check mode it runs the read-only checks and
    skips those that load the GPUs (see the check_mode attribute).
  - "The checks that load the GPUs (C(cuda_smoke), C(dcgm_diag), C(nccl_busbw), C(gpu_burn): the V(standard) and V(full) levels)
    run only on a node that runs no compute process (nvidia-smi) and is known to be drained (O(slurm_node_record) or O(drained)).
    Otherwise the task fails before any check runs, naming the node, the processes or its state, and what to do."
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.gpu_tools
attributes:
  check_mode:
    support: full
    details:
      - Runs every read-only check (the V(quick) level) as outside check mode.
      - Skips C(cuda_smoke), C(dcgm_diag), C(nccl_busbw) and C(gpu_burn) with status V(skip) and a message saying
        that they load the GPUs and are not run in check mode, so that C(--check) starts no load on a live node.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  idempotent:
    support: full
    details:
      - This action does not modify state.
options:
  level:
    description:
      - Which checks to run; see the description for what each level contains.
      - Ignored when O(checks) is set.
    type: str
    choices: [quick, standard, full]
    default: quick
  checks:
    description:
      - Run exactly these checks, whatever O(level) says.
    type: list
    elements: str
    choices: [gpu_count, driver_version, fabricmanager, xid, ecc, temperature, clocks_event_reasons, pcie_link, nvlink,
              ib_ports, peermem, dcgm, cuda_smoke, dcgm_diag, nccl_busbw, gpu_burn]
  skip_checks:
    description: Checks not to run.
    type: list
    elements: str
    choices: [gpu_count, driver_version, fabricmanager, xid, ecc, temperature, clocks_event_reasons, pcie_link, nvlink,
              ib_ports, peermem, dcgm, cuda_smoke, dcgm_diag, nccl_busbw, gpu_burn]
    default: []
  expected_gpu_count:
    description:
      - Number of GPUs the node must have, from V(1) to V(64).
      - When not set, the count C(nvidia-smi) sees must equal the NVIDIA display controllers on the PCI bus.
    type: int
  expected_driver_version:
    description:
      - Driver version that must be loaded, whole (V(550.90.07), V(572.61)); a cut-off version such as V(535.161) is refused.
      - When not set, any loaded driver passes if C(nvidia-smi) matches it.
    type: str
  expected_fabricmanager_version:
    description:
      - Fabric manager version required, a whole driver version. Defaults to the loaded driver version on NVSwitch systems.
      - On nodes without NVSwitch the check is skipped unless this is set.
    type: str
  expected_stack:
    description:
      - The C(stack) section of the node's bill of materials (C(gpufleet_bom.stack), see the audit's documentation), for the
        C(ib_ports), C(peermem) and C(dcgm) checks. Its other keys (C(ofed), C(secure_boot), C(module_parameters)) are
        accepted and left to the audit.
      - >-
        C(rdma_ports) is a list of port groups C({count, link_layer, rate, ca_type, devices}) (C(link_layer) V(InfiniBand) or
        V(Ethernet) for RoCE; C(rate) in Gb/s as C(ibstat) prints it). C(ib_ports) reads C(ibstat) (or C(ibv_devinfo), which
        prints no rate and so cannot pass); each group needs exactly C(count) ports, each Active / LinkUp at C(rate). A port
        that is not Active fails naming its state (the rate it reports is not one it runs at), a port at another rate fails
        naming both rates, and a device of C(devices) that the node lacks fails naming it.
      - >-
        C(peermem=true) makes C(peermem) check that C(nvidia_peermem) is loaded (C(lsmod)) and that its version
        (C(/sys/module/nvidia_peermem/version), else C(modinfo)) is the loaded driver's. Where it is not loaded, the check
        reads the kernel log (C(dmesg)) for C(Unknown symbol ib_register_peer_memory_client) and the kernel's
        C(modules.symbols) for OFED's peer-memory API, and says what to do (install OFED for the running kernel, or rebuild
        the driver's nvidia-peermem after OFED).
      - >-
        C(dcgm) (a version such as V(4.7.0), or C({version})) makes C(dcgm) check that DCGM's host engine answers
        (C(dcgmi -v), confirmed with C(dcgmi discovery -l)) and runs that version. Without it the check runs only when
        O(checks) names it, and then checks only that the host engine answers.
      - A bad value fails the task before any command, naming the key.
    type: dict
    version_added: 0.2.0
  critical_xids:
    description:
      - Xid codes that fail the C(xid) check, each from V(1) to V(999).
        Defaults to the codes NVIDIA's Xid catalog says need a reset, reboot or inspection.
    type: list
    elements: int
  xid_since:
    description:
      - Only Xid events from this time on count. V(boot) (the default) counts every event in the kernel log since boot.
      - An ISO 8601 time (V(2025-01-21T04:41:44Z); without a zone it is the node's local time) or seconds since the epoch.
      - Events whose time cannot be placed count, so that no Xid is missed.
    type: str
    default: boot
  max_temperature_c:
    description: The C(temperature) check fails when a GPU is hotter than this (degrees Celsius, from V(1) to V(125)).
    type: int
    default: 85
  slowdown_reasons:
    description:
      - Clock event reasons that fail the C(clocks_event_reasons) check when active on any GPU.
      - C(sw_power_cap) (normal at the power limit under load) is reported as a warning and cannot be listed here.
    type: list
    elements: str
    choices: [hw_slowdown, hw_thermal, sw_thermal, hw_power_brake]
    default: [hw_slowdown, hw_thermal, sw_thermal, hw_power_brake]
  dcgm_level:
    description:
      - C(dcgmi diag -r) level of the C(dcgm_diag) check. Defaults to V(2) for O(level=quick) and O(level=standard), V(3) for O(level=full).
    type: int
    choices: [1, 2, 3, 4]
  nccl_min_busbw_gbps:
    description:
      - Lowest acceptable average bus bandwidth of C(all_reduce_perf) in GB/s (the C(# Avg bus bandwidth) line), from V(0.001) to V(10000).
      - Without it and without a baseline figure, the bandwidth is measured but not judged (V(warn)).
    type: float
  nccl_args:
    description:
      - Arguments of C(all_reduce_perf). Defaults to C(-b 1G -e 8G -f 2 -g N) where N is O(expected_gpu_count) or the GPUs seen.
    type: list
    elements: str
  burn_seconds:
    description: How long C(gpu_burn) loads the GPUs, in seconds, from V(1) to V(43200).
    type: int
    default: 60
  burn_args:
    description: Extra arguments of C(gpu_burn) before the duration, for example C([-tc, -c, /opt/gpu-burn/compare.ptx]).
    type: list
    elements: str
    default: []
  cuda_smoke_command:
    description:
      - Command (argument list, no shell) that runs a CUDA kernel and exits 0 on success.
      - When not set, C(deviceQuery) from cuda-samples is used if it is on the node; otherwise the check is skipped and says so.
    type: list
    elements: str
  baseline:
    description:
      - The node's state before the change, to compare with. Accepts a registered C(gpufleet.lifecycle.gpu_facts) result,
        C(ansible_facts.gpufleet), or a registered C(gpufleet.lifecycle.gpu_validate) result (whose RV(snapshot) and
        RV(measurements) carry ECC, Xid and bandwidth figures).
    type: dict
  baseline_busbw_tolerance_pct:
    description: How far, in percent, the NCCL bus bandwidth may fall below the baseline's, from V(0) to V(99.9).
    type: float
    default: 10
  timeout:
    description:
      - Time limit in seconds of each long check (DCGM, NCCL, gpu-burn, CUDA smoke test), from V(1) to V(86400).
        A check that reaches it fails and says so.
      - The reads of the node (C(nvidia-smi -q -x), C(nvidia-smi nvlink -s)...) have their own, shorter limit, O(command_timeout).
      - C(gpu_burn) gets at least O(burn_seconds) plus 60 seconds.
      - To run long levels on many nodes at once, use C(async) with a limit above the sum of the long checks' times.
    type: int
    default: 1800
  drained:
    description:
      - Whether the node is out of service for workloads (drained, cordoned), for a node that Slurm does not schedule.
      - The checks that load the GPUs run only when this is V(true) or O(slurm_node_record) shows the node drained with no
        job left, and no compute process runs on its GPUs. Unset means unknown, which refuses them.
      - Not used in check mode, where those checks are skipped.
    type: bool
    version_added: 0.2.0
  slurm_node_record:
    description:
      - The node's C(scontrol show node -o NODE) output, whole (with its last newline; C(strip_empty_ends=false) of
        M(ansible.builtin.command)); the C(gpufleet.lifecycle.gpu_validate) role reads it where Slurm answers.
      - The node counts as drained when Slurm shows the DRAIN flag and no job left on it (not ALLOCATED, MIXED or COMPLETING).
        A record that cannot be read fails the task before any command.
      - Mutually exclusive with O(drained).
    type: str
    version_added: 0.2.0
  fail_on:
    description:
      - V(fail) fails the task when any check fails. V(never) always returns the results, for reports and fleet-wide comparisons.
    type: str
    choices: [fail, never]
    default: fail
  dcgmi_path:
    description: Path of C(dcgmi). Searched when not set.
    type: path
  all_reduce_perf_path:
    description: Path of nccl-tests' C(all_reduce_perf). Searched when not set.
    type: path
  gpu_burn_path:
    description: Path of C(gpu_burn). Searched when not set.
    type: path
notes:
  - The stack checks only read, each read bounded by O(command_timeout) (C(ibstat), C(lsmod), C(modinfo nvidia_peermem),
    C(dmesg) where peermem is not loaded, C(dcgmi -v) and C(dcgmi discovery -l)).
  - Reading the kernel log for Xid events needs root on kernels with C(kernel.dmesg_restrict=1); run the task with C(become=true).
  - Idle GPUs train their PCIe link down to save power; a lower generation on an idle GPU is a V(warn), a narrower link a V(fail).
  - C(gpu_burn) needs its C(compare.ptx); pass its path with O(burn_args) (C(-c)) when it is not in the working directory.
seealso:
  - module: gpufleet.lifecycle.gpu_facts
  - module: gpufleet.lifecycle.validation_report
"""

EXAMPLES = r"""
- name: Quick health check of every node
  gpufleet.lifecycle.gpu_validate:
    expected_gpu_count: 8
    expected_driver_version: 550.90.07
  become: true

- name: Keep the state before the upgrade
  gpufleet.lifecycle.gpu_validate:
    level: quick
    fail_on: never
  become: true
  register: before

- name: Read the node's Slurm state (the load checks run only on a drained node)
  ansible.builtin.command:
    argv: [scontrol, show, node, -o, "{{ inventory_hostname_short }}"]
    strip_empty_ends: false  # whole, with its last newline
  changed_when: false
  register: slurm_node

- name: Full validation after the upgrade, compared with the state before
  gpufleet.lifecycle.gpu_validate:
    level: full
    slurm_node_record: "{{ slurm_node.stdout }}"
    expected_gpu_count: 8
    expected_driver_version: 570.124.06
    nccl_min_busbw_gbps: 350
    baseline: "{{ before }}"
    timeout: 3600
  become: true
  async: 7200
  poll: 30

- name: Quick check with the SKU's stack (InfiniBand ports, nvidia-peermem, DCGM) from its bill of materials
  gpufleet.lifecycle.gpu_validate:
    expected_gpu_count: 8
    expected_driver_version: 570.124.06
    expected_stack:
      rdma_ports:
        - {count: 8, link_layer: InfiniBand, rate: 400, ca_type: MT4129}
      peermem: true
      dcgm: 4.7.0
  become: true

- name: Only DCGM level 3 and gpu-burn, for a report
  gpufleet.lifecycle.gpu_validate:
    checks: [dcgm_diag, gpu_burn]
    drained: true  # out of service in the site's own scheduler
    dcgm_level: 3
    burn_seconds: 300
    fail_on: never
  become: true
  register: burn_in
"""

RETURN = r"""
status:
  description: V(fail) if any check failed, else V(warn) if any warned, else V(pass) (skipped checks do not count).
  returned: always
  type: str
  sample: fail
summary:
  description: Number of checks per status.
  returned: always
  type: dict
  sample: {pass: 9, fail: 1, warn: 0, skip: 1}
failed_checks:
  description: Names of the checks that failed.
  returned: always
  type: list
  elements: str
  sample: [xid]
level:
  description: The level run.
  returned: always
  type: str
  sample: quick
checks:
  description: One entry per check run, in run order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The check.
      type: str
      returned: always
      sample: xid
    status:
      description: V(pass), V(fail), V(warn) or V(skip).
      type: str
      returned: always
      sample: fail
    observed:
      description: What the node showed (a number, a string, or a small dict or list).
      type: raw
      returned: always
      sample: {critical: {"79": 1}, counts: {"79": 1}}
    expected:
      description: What passes.
      type: raw
      returned: always
      sample: {critical: {}, since: boot}
    message:
      description: The verdict in words, with what to do next when it failed.
      type: str
      returned: always
      sample: "critical Xid since boot: Xid 79 (GPU has fallen off the bus) x1: drain the node and reset the GPU (on 0000:2a:00)"
measurements:
  description: Figures for fleet-wide comparison (the C(gpufleet.lifecycle.stragglers) filter). A figure not measured is V(null).
  returned: always
  type: dict
  contains:
    busbw_gbps:
      description: Average bus bandwidth of C(all_reduce_perf), GB/s.
      type: float
      returned: always
      sample: 361.2
    busbw_peak_gbps:
      description: Highest bus bandwidth of any message size, GB/s.
      type: float
      returned: always
      sample: 388.4
    gflops:
      description: Gflop/s of each GPU at the end of C(gpu_burn).
      type: list
      elements: float
      returned: always
      sample: [41200.0, 41150.0]
    gflops_min:
      description: The slowest GPU's Gflop/s under C(gpu_burn); a GPU slowed by heat or power shows here.
      type: float
      returned: always
      sample: 41150.0
    temperature_c:
      description: Temperature of each GPU before any load.
      type: list
      elements: int
      returned: always
      sample: [34, 36]
    clocks_event_reasons:
      description: Active clock event reasons of each GPU.
      type: list
      elements: list
      returned: always
      sample: [[gpu_idle], [gpu_idle]]
snapshot:
  description: ECC counters, Xid counts, boot id and bandwidth of this run; pass the whole result as O(baseline) of a later run.
  returned: always
  type: dict
  sample: {snapshot_version: 1, boot_id: 3c5b8a44-7e1b-4d93-9d6e-1f0b7a1f2c55, driver_version: 550.90.07, xid_counts: {}, busbw_gbps: null,
           gpus: [{index: 0, uuid: GPU-5c0b6e0e, aggregate_dbe: 0, volatile_dbe: 0, remapped_uncorrectable: 0, retired_double_bit: null}]}
commands_run:
  description: Number of processes started on the node.
  returned: always
  type: int
  sample: 6
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.baseline import BaselineError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.levels import CHECK_NAMES, LEVELS, Validator

SLOWDOWN_REASONS = ["hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"]


def _failure_message(result):
    failed = [c for c in result["checks"] if c["status"] == "fail"]
    return "gpu_validate ({}): {} of {} checks failed: {}".format(
        result["level"], len(failed), len(result["checks"]), "; ".join("{}: {}".format(c["name"], c["message"]) for c in failed)
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            level=dict(type="str", choices=list(LEVELS), default="quick"),
            checks=dict(type="list", elements="str", choices=list(CHECK_NAMES)),
            skip_checks=dict(type="list", elements="str", choices=list(CHECK_NAMES), default=[]),
            expected_gpu_count=dict(type="int"),
            expected_driver_version=dict(type="str"),
            expected_fabricmanager_version=dict(type="str"),
            expected_stack=dict(type="dict"),
            critical_xids=dict(type="list", elements="int"),
            xid_since=dict(type="str", default="boot"),
            max_temperature_c=dict(type="int", default=85),
            slowdown_reasons=dict(type="list", elements="str", choices=SLOWDOWN_REASONS, default=SLOWDOWN_REASONS),
            dcgm_level=dict(type="int", choices=[1, 2, 3, 4]),
            nccl_min_busbw_gbps=dict(type="float"),
            nccl_args=dict(type="list", elements="str"),
            burn_seconds=dict(type="int", default=60),
            burn_args=dict(type="list", elements="str", default=[]),
            cuda_smoke_command=dict(type="list", elements="str"),
            baseline=dict(type="dict"),
            baseline_busbw_tolerance_pct=dict(type="float", default=10),
            timeout=dict(type="int", default=1800),
            command_timeout=dict(type="int", default=120),
            drained=dict(type="bool"),
            slurm_node_record=dict(type="str"),
            fail_on=dict(type="str", choices=["fail", "never"], default="fail"),
            nvidia_smi_path=dict(type="path"),
            fabricmanager_path=dict(type="path"),
            dcgmi_path=dict(type="path"),
            all_reduce_perf_path=dict(type="path"),
            gpu_burn_path=dict(type="path"),
        ),
        mutually_exclusive=[("drained", "slurm_node_record")],
        supports_check_mode=True,
    )
    try:
        # Every option is checked here, before the first command.
        validator = Validator(module, module.params)
    except BaselineError as exc:
        module.fail_json(msg=f"baseline: {exc}. Pass a registered gpu_facts or gpu_validate result.")
    except (GpufleetError, ValueError) as exc:
        # OptionError (a range), a level or check name, an xid_since that is not a time.
        module.fail_json(**fail_kwargs(exc))
    try:
        result = validator.run()
    except (GpufleetError, ParseError) as exc:
        # The checks turn their own errors into verdicts; this is what is left outside them. A bug keeps its traceback.
        module.fail_json(**fail_kwargs(exc))
    if result["status"] == "fail" and module.params["fail_on"] == "fail":
        module.fail_json(msg=_failure_message(result), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
