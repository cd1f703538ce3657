#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Gather the NVIDIA driver, GPU, NVSwitch, fabric manager, ConnectX and Xid state of a GPU node
version_added: 0.1.0
description:
  - Reads what is installed and running on an NVIDIA GPU node and returns it as C(ansible_facts.gpufleet).
  - Covers the driver (version, open or proprietary kernel module, branch, loaded or not), the CUDA version the driver supports,
    every GPU (name, UUID, serial, PCI bus id, VBIOS, ECC double-bit error counts, remapped rows or retired pages pending,
    temperature, clocks event reasons, GPU processes), NVSwitch presence, the fabric manager (version, running, matching the driver),
    the persistence daemon, ConnectX NICs (PSID, part number, firmware) and Xid events in the kernel log since boot.
  - A node without GPUs or without a driver returns facts that say so and does not fail.
    A tool that prints something unexpected fails the task with the tool, the command and its output.
  - Built for fleet-wide runs. One call reads C(/proc) and C(/sys) directly and starts at most five processes
    (C(nvidia-smi -q -x), C(nv-fabricmanager --version), C(systemctl is-active), C(dmesg), C(mlxfwmanager --query));
    C(modinfo nvidia) is added only when the driver is installed but not loaded, and C(mstflint q) once per ConnectX adapter only
    when C(mlxfwmanager) is absent. On a node with IMEX (GB200 / GB300 NVL72 compute trays) three more are started
    (C(nvidia-imex --version), C(systemctl is-active nvidia-imex), C(nvidia-imex-ctl -N -j), JSON, from R580; C(-N) before, or
    again when an IMEX refuses C(-j)); a node without it starts none of them.
    The number started is returned as RV(ansible_facts.gpufleet.commands_run).
  - The reads do not depend on each other and run at the same time, one thread each, so a call takes about as long as its slowest
    read (C(nvidia-smi -q -x) or C(mlxfwmanager --query) take seconds on a real node), not their sum. Each is still bounded by
    O(command_timeout); when several fail, the task reports the first in the order above.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.gpu_tools
  - gpufleet.lifecycle.attributes.INFO_MODULE
  - gpufleet.lifecycle.attributes.FACTS
attributes:
  facts:
    support: full
options:
  gather_subset:
    description:
      - What to gather. The driver, kernel, boot id and NVSwitch presence are always gathered.
      - V(gpus) runs C(nvidia-smi), V(fabricmanager) runs C(nv-fabricmanager) and C(systemctl), V(nics) runs the Mellanox tools,
        V(xid) reads the kernel log.
      - V(imex) reads C(/etc/nvidia-imex/nodes_config.cfg) and, only where C(nvidia-imex) is installed (GB200 / GB300 NVL72 trays),
        runs C(nvidia-imex --version), C(systemctl is-active nvidia-imex) and C(nvidia-imex-ctl -N -j) (C(-N) before R580).
      - V(stack) is not part of V(all), name it (for example V([all, stack])). It runs, where installed, C(ofed_info -s), C(ibstat)
        (or C(ibv_devinfo)), C(lsmod), C(modinfo) of C(nvidia), C(nvidia_peermem) and C(mlx5_core), C(mokutil --sb-state)
        (and C(--list-enrolled) where Secure Boot is on), C(dkms status), C(dcgmi --version) and C(nv-hostengine --version),
        and reads C(/sys/module/<module>/parameters). A tool that is not installed is reported as absent, not as an error.
    type: list
    elements: str
    choices: [all, driver, gpus, fabricmanager, imex, nics, xid, stack]
    default: [all]
  critical_xids:
    description:
      - Xid codes that count as critical in RV(ansible_facts.gpufleet.xid.critical), each from V(1) to V(999).
      - Defaults to the codes that NVIDIA's Xid catalog says need attention.
    type: list
    elements: int
  mlxfwmanager_path:
    description: Path of C(mlxfwmanager). Searched when not set.
    type: path
  mstflint_path:
    description: Path of C(mstflint), used for ConnectX NICs when C(mlxfwmanager) is absent. Searched when not set.
    type: path
notes:
  - The kernel ring buffer read by C(dmesg) holds events since boot until it wraps; on a node with a very chatty kernel, early Xid
    events can be lost from it.
  - Every read is bounded by O(command_timeout); a tool that does not answer in time (a hung NVML) fails the task with the tool's name and the limit.
  - Reading the kernel log needs root on kernels with C(kernel.dmesg_restrict=1); without it RV(ansible_facts.gpufleet.xid.error) says so.
seealso:
  - module: gpufleet.lifecycle.gpu_validate
"""

EXAMPLES = r"""
- name: Gather GPU facts
  gpufleet.lifecycle.gpu_facts:

- name: Gather only the driver and GPUs (two processes)
  gpufleet.lifecycle.gpu_facts:
    gather_subset: [driver, gpus]

- name: Show the driver of every node
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpufleet.driver.version }} ({{ ansible_facts.gpufleet.driver.flavor }})"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet:
      description: The node's GPU stack.
      returned: always
      type: dict
      contains:
        kernel:
          description: Kernel release (C(uname -r)).
          type: str
          returned: always
          sample: 6.1.0-28-amd64
        boot_id:
          description: The kernel's boot id; it changes on every boot.
          type: str
          returned: always
          sample: 3c5b8a44-7e1b-4d93-9d6e-1f0b7a1f2c55
        driver:
          description:
            - The NVIDIA driver.
            - C(installed) is V(false) when no driver is installed, also when C(nvidia-smi) is on the path but C(modinfo) finds
              no C(nvidia) kernel module for the running kernel; C(installed) V(true) with C(loaded) V(false) is a driver
              installed but not loaded.
          type: dict
          returned: always
          sample: {installed: true, loaded: true, version: 550.90.07, flavor: open, branch: R550, arch: x86_64}
        cuda_version:
          description: Highest CUDA version the loaded driver supports, as C(nvidia-smi) prints it.
          type: str
          returned: when gpus or driver are gathered
          sample: "12.4"
        gpu_count:
          description: Number of GPUs C(nvidia-smi) sees.
          type: int
          returned: when gpus or driver are gathered
          sample: 8
        pci_gpu_count:
          description: Number of NVIDIA display controllers on the PCI bus; more than RV(ansible_facts.gpufleet.gpu_count) means a GPU is lost.
          type: int
          returned: when gpus or driver are gathered
          sample: 8
        nvidia_smi:
          description: V(ok), V(absent), V(no_driver), V(no_devices), V(gpu_lost) or V(version_mismatch) (user space and kernel module differ).
          type: str
          returned: when gpus or driver are gathered
          sample: ok
        gpus:
          description:
            - One entry per GPU, as read from C(nvidia-smi -q -x).
            - Its firmware as the GPU reports it in band is C(vbios_version), C(inforom_version) (the InfoROM image) and
              C(gsp_firmware_version) (V(null) where
              C(nvidia-smi) prints N/A); the HGX bundle, NVSwitch, BMC and BIOS firmware are read out of band from the BMC
              by the audit playbook, not by this module.
          type: list
          elements: dict
          returned: when gpus or driver are gathered
          sample:
            - index: 0
              name: NVIDIA H100 80GB HBM3
              uuid: GPU-5c0b6e0e-8b8f-4c4b-9a53-0f1b2e1c3d4e
              serial: "1652223014857"
              pci_bus_id: 00000000:18:00.0
              vbios_version: 96.00.74.00.0D
              inforom_version: G520.0200.00.05
              gsp_firmware_version: 550.90.07
              ecc: {volatile_dbe: 0, aggregate_dbe: 0}
              remapped_rows: {pending: false, failure: false}
              temperature_c: 34
              clocks_event_reasons_active: []
              addressing_mode: ATS
              fabric: {state: Completed, status: Success, clique_id: 2, cluster_uuid: 6a1b2c3d-0000-4000-8000-00000000beef, health: Healthy, multi_node: true}
        gpu_processes:
          description: Processes using a GPU (pid, name, used memory, GPU).
          type: list
          elements: dict
          returned: when gpus or driver are gathered
          sample: []
        nvswitch:
          description: NVSwitch presence and count.
          type: dict
          returned: always
          sample: {present: true, count: 4, devices: ["0000:05:00.0"]}
        persistenced:
          description: Whether nvidia-persistenced runs.
          type: dict
          returned: always
          sample: {running: true, state: active}
        fabricmanager:
          description: Fabric manager version, state, and whether it equals the driver version.
          type: dict
          returned: when fabricmanager is gathered
          sample: {installed: true, version: 550.90.07, running: true, state: active, matches_driver: true, required: true}
        nvlink:
          description:
            - The multi-node NVLink domain of the node, from every GPU's Fabric block (the C(fabric) of each GPU).
            - C(cluster_uuid) is the ClusterUUID all GPUs agree on (it names the NVLink domain), V(null) when they disagree
              (listed in C(problems)); C(multi_node) is V(false) for the all-zero UUID (HGX, PCIe, or a tray whose fabric failed to join)
              and V(null) without any Fabric block.
            - C(fabric_ok) is V(true) when every fabric is C(Completed), C(Success) and C(Healthy) (or prints no health summary).
          type: dict
          returned: when gpus or driver are gathered
          sample: {cluster_uuid: 6a1b2c3d-0000-4000-8000-00000000beef, clique_id: 2, multi_node: true, fabric_ok: true, problems: []}
        cdmm:
          description:
            - Coherent driver-based memory management (R580+), read from C(/proc/driver/nvidia/params) (C(CoherentGPUMemoryMode)).
            - C(enabled) is V(true) for mode C(driver); both are V(null) without a loaded driver or on a driver that does not print the parameter.
          type: dict
          returned: always
          sample: {mode: driver, enabled: true}
        imex:
          description:
            - IMEX on a GB200 / GB300 NVL72 tray. C(installed) is V(false) on a node without C(nvidia-imex) (HGX, PCIe), which is not an error.
            - C(version) from C(nvidia-imex --version); C(matches_driver) whether it is the loaded driver's (IMEX refuses to start otherwise);
              C(service_state) of C(nvidia-imex.service); C(nodes_config) the addresses of C(/etc/nvidia-imex/nodes_config.cfg).
            - C(domain) is what C(nvidia-imex-ctl -N -j) (or C(-N)) prints (nodes with state and version, C(domain_state), C(domain_up),
              C(version_mismatch) for C(!V!), C(node_map_mismatch) for C(!M!)), V(null) with C(domain_error) when it gave none.
            - C(problems) lists every reason the IMEX domain is not ready.
          type: dict
          returned: when imex is gathered
          sample:
            installed: true
            version: 580.95.05
            matches_driver: true
            service_state: active
            nodes_config: [10.0.0.1, 10.0.0.2]
            domain: {domain_state: UP, domain_up: true, version_mismatch: false, node_map_mismatch: false}
            problems: []
        stack:
          description:
            - The software stack around the driver (gathered only when O(gather_subset) names V(stack)).
            - C(ofed) is C(flavor) V(mlnx-ofed) (C(MLNX_OFED_LINUX-...)), V(doca-ofed) (C(OFED-internal-...)) or V(inbox) (no C(ofed_info)),
              with its C(version).
            - C(rdma) lists the InfiniBand / RoCE C(ports) (C(device), C(port), C(state), C(physical_state), C(rate_gbps), C(link_layer),
              C(active)) from C(ibstat) (C(source)); C(rate_gbps) is V(null) for a port that is not Active (its rate is not
              trusted) and everywhere C(ibv_devinfo) was the source (it prints none). C(ports) is V(null) when neither tool is installed.
            - C(modules) gives C(nvidia), C(nvidia_peermem) and C(mlx5_core) (C(loaded), C(installed), C(version), C(signer), C(signed)).
            - C(secure_boot) is C(state) (V(enabled), V(disabled), V(not_supported), V(unknown); V(null) without C(mokutil)), C(enforcing)
              and, where enabled, C(enrolled_keys) (C(sha1), C(cn); the short listing gives the first ten hex digits).
            - C(dkms) lists its C(entries) and C(errors), and for C(nvidia) the C(kernels) it is installed for and
              C(built_for_running_kernel). C(dcgm) gives C(version) (C(dcgmi)) and C(hostengine_version).
            - C(module_parameters) is C(/sys/module/<module>/parameters) of the loaded nvidia, nvidia_uvm, nvidia_peermem, mlx5_core
              and ib_core modules. C(problems) lists what is wrong whatever the BOM says (DKMS errors, an NVIDIA DKMS module not built
              for the running kernel, a device C(ibstat) could not read).
          type: dict
          returned: when stack is gathered
          sample:
            ofed: {installed: true, flavor: doca-ofed, version: 24.10-1.1.4.0.200, release: OFED-internal-24.10-1.1.4.0.200}
            rdma: {source: ibstat, ports: [{device: mlx5_0, port: 1, state: Active, physical_state: LinkUp, rate_gbps: 400,
                   link_layer: InfiniBand, active: true}], errors: []}
            modules: {nvidia_peermem: {loaded: true, installed: true, version: 580.95.05, signer: null, signed: false}}
            secure_boot: {state: disabled, enforcing: false, setup_mode: false, enrolled_keys: null}
            dkms: {installed: true, errors: [], nvidia: {versions: [580.95.05], kernels: [6.8.0-90-generic], built_for_running_kernel: true}}
            dcgm: {installed: true, version: 4.7.0, hostengine_version: 4.7.0}
            module_parameters: {nvidia: {NVreg_EnableGpuFirmware: "1"}}
            problems: []
        nics:
          description:
            - ConnectX adapters with PSID, part number and firmware.
            - A device the Mellanox tool could not open is listed with C(query_failed=true) and its C(status) (for
              example C(Failed to open device)); its PSID and versions are V(null), and it is never flashed.
          type: list
          elements: dict
          returned: when nics is gathered
          sample: [{pci: "0000:1a:00.0", psid: MT_0000000838, part_number: MCX755106AS-HEA_Ax, fw_current: 28.39.1002}]
        xid:
          description: Xid events in the kernel log since boot, counts per code, and the critical codes seen.
          type: dict
          returned: when xid is gathered
          contains:
            source:
              description: Where the events were read (V(dmesg)), or V(null) when no kernel log reader exists.
              type: str
              returned: always
              sample: dmesg
            events:
              description: Each Xid or SXid line, parsed (xid, pci_bus_id, message, pid, process, timestamp, kind).
              type: list
              elements: dict
              returned: always
              sample: [{xid: 79, pci_bus_id: "0000:2a:00", pid: 41234, process: python3, message: GPU has fallen off the bus., kind: xid}]
            counts:
              description: Number of events per Xid code.
              type: dict
              returned: always
              sample: {"79": 1}
            critical:
              description: Codes seen that are in O(critical_xids).
              type: list
              elements: int
              returned: always
              sample: [79]
            error:
              description: Why the kernel log could not be read (for example C(dmesg) refused to a non-root user).
              type: str
              returned: when the kernel log could not be read
              sample: "dmesg: read kernel buffer failed: Operation not permitted"
        commands_run:
          description: Number of processes this call started on the node.
          type: int
          returned: always
          sample: 5
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError, fail_kwargs
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.gather import (
    DEFAULT_COMMAND_TIMEOUT,
    OPT_IN_SUBSETS,
    SUBSETS,
    check_options,
    gather,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gather_subset=dict(type="list", elements="str", default=["all"], choices=["all", *list(SUBSETS), *list(OPT_IN_SUBSETS)]),
            critical_xids=dict(type="list", elements="int"),
            command_timeout=dict(type="int", default=DEFAULT_COMMAND_TIMEOUT),
            nvidia_smi_path=dict(type="path"),
            fabricmanager_path=dict(type="path"),
            mlxfwmanager_path=dict(type="path"),
            mstflint_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    try:
        # Every option is checked before the first command.
        options = check_options(module.params)
        facts = gather(module, **options)
    except (GpufleetError, ParseError) as exc:
        # A typed error says what was wrong and what to do; any other exception is a bug and keeps its traceback.
        module.fail_json(**fail_kwargs(exc))
    module.exit_json(changed=False, ansible_facts={"gpufleet": facts})


if __name__ == "__main__":
    main()
