#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: bmc_inventory
short_description: Read the Redfish firmware inventory of many BMCs in one call, from the controller
version_added: 0.2.0
description:
  - Reads C(UpdateService/FirmwareInventory) of every BMC in O(bmcs) over Redfish, in one task on one host (the controller),
    and returns each BMC's members with the keys C(community.general.redfish_info) returns for C(GetFirmwareInventory)
    (C(Name), C(Id), C(Status), C(Version), C(Updateable), C(SoftwareId), C(LowestSupportedVersion), C(Manufacturer),
    C(ReleaseDate)).
  - Built for fleet audits. C(redfish_info) runs as one module per host and opens a new TLS connection for each of a BMC's
    requests (about 20 for an HGX node); this module keeps one HTTPS connection open per BMC for all of its requests and reads
    O(workers) BMCs at a time, so a fleet's inventories cost one module run and one TLS handshake per BMC.
  - Each request carries HTTP Basic authentication, so no Redfish session is left open on a BMC.
  - A BMC that refuses, does not answer or answers something that is not a firmware inventory is a finding, not a failure -
    its RV(inventories) entry holds C(error), which says what was wrong and what to do, and the other BMCs are still read.
    Only wrong parameters fail the task.
  - Follows only links to paths on the BMC it was given (a member link naming another host is refused, so the credentials go to
    no other host), reads at most 4 MiB a response, 1024 members and 64 pages of members.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.attributes.INFO_MODULE
options:
  bmcs:
    description:
      - The BMCs to read, one per host. Build it from the inventory with the P(gpufleet.lifecycle.bmc_endpoints#filter) filter.
      - Not logged - the module's "Invoked with" line in syslog or the journal shows V(NOT_LOGGING_PARAMETER) for it - but
        returned in C(invocation) with only the passwords masked.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The host the BMC belongs to; RV(inventories) is keyed by it. Unique.
        type: str
        required: true
      address:
        description: The BMC's host name or IP address, without a scheme, path or port.
        type: str
        required: true
      port:
        description: The BMC's HTTPS port.
        type: int
        default: 443
      user:
        description: The Redfish user.
        type: str
        required: true
      password:
        description:
          - The Redfish user's password, sent to this BMC only. Never returned or logged.
          - Masked in the result as C(no_log) options are, each BMC's entry with its own password (the only one it was sent), in
            time linear in the number of BMCs.
        type: str
        required: true
  validate_certs:
    description:
      - Verify each BMC's TLS certificate and that it names the address given.
      - V(false) warns - anyone on the network path to a BMC could pose as it and receive its user and password.
    type: bool
    default: true
  ca_path:
    description: A PEM file of the CA that signed the BMCs' certificates; the system's CA bundle when not given.
    type: path
  timeout:
    description: Seconds each request may take (connecting, the TLS handshake and the answer), 1 to 600.
    type: int
    default: 30
  total_timeout:
    description: Seconds all the requests to one BMC may take together, 1 to 3600 and at least O(timeout).
    type: int
    default: 300
  workers:
    description: How many BMCs are read at the same time, 1 to 256.
    type: int
    default: 32
  expand:
    description:
      - Ask a BMC whose service root advertises C(ProtocolFeaturesSupported.ExpandQuery) for the inventory with its members
        expanded (Redfish C($expand)), one request instead of one per member.
      - A member the BMC did not expand is read on its own, and a BMC that refuses the expanded request is read member by
        member, so the entries are the same with or without it. V(false) always reads member by member.
    type: bool
    default: true
notes:
  - Run it once for the fleet on the controller (C(run_once), or a play on C(localhost)), not once per host.
seealso:
  - module: community.general.redfish_info
  - module: gpufleet.lifecycle.fleet_report
"""

EXAMPLES = r"""
- name: Read every BMC's firmware inventory
  gpufleet.lifecycle.bmc_inventory:
    bmcs: "{{ groups['gpu_nodes'] | map('extract', hostvars) | gpufleet.lifecycle.bmc_endpoints }}"
    ca_path: /etc/pki/bmc-ca.pem
  register: bmc

- name: Show the BMCs that could not be read
  ansible.builtin.debug:
    msg: "{{ item }}: {{ bmc.inventories[item].error }}"
  loop: "{{ bmc.summary.errors }}"
"""

RETURN = r"""
inventories:
  description: For each O(bmcs[].name), what its BMC answered.
  returned: always
  type: dict
  sample:
    gpu-01:
      entries:
        - {Id: HGX_FW_BMC_0, Name: HGX_FW_BMC_0 firmware, Version: HGX-22.10-1, Updateable: true, Status: {State: Enabled, Health: OK}}
      expand: null
      requests: 22
      connections: 1
      seconds: 0.41
    gpu-02:
      error: "10.0.2.2:443: the BMC refused the credentials of user 'admin' (HTTP 401): check bmc_user and bmc_password"
      requests: 1
      connections: 1
      seconds: 0.05
  contains:
    entries:
      description: The firmware inventory's members, in the BMC's order; absent when C(error) is set.
      type: list
      elements: dict
    expand:
      description:
        - The C($expand) query the inventory was read with (for example C($expand=.($levels=1))), or V(null) when it was read
          member by member (not advertised, refused, or O(expand=false)); absent when C(error) is set.
      type: str
    error:
      description: Why the BMC's inventory could not be read, and what to do; absent when it was read.
      type: str
    requests:
      description: The HTTP requests answered by the BMC.
      type: int
    connections:
      description: The TLS connections opened to it (1 unless the BMC closed a kept-alive connection).
      type: int
    seconds:
      description: How long reading it took.
      type: float
summary:
  description: Counts over every BMC.
  returned: always
  type: dict
  sample: {bmcs: 2, read: 1, errors: [gpu-02], requests: 23, connections: 2, seconds: 0.43}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish.inventory import ARGUMENT_SPEC, run, warnings
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish.secrets import finish


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    for warning in warnings(module.params):
        module.warn(warning)
    try:
        result = run(module.params)
    except GpufleetError as exc:
        result = dict(exc.fail_kwargs(), failed=True, changed=False)
    finish(module, result)


if __name__ == "__main__":
    main()
