"""The simulated BMCs: a Redfish service over HTTPS per node, on the fleet's management addresses.

- `redfish`: the Redfish resources and actions of one node's BMC (`BmcService`), from the node's state
- `updates`: firmware update tasks (PLDM package in, staged firmware and reset requests out)
- `server`: the bounded HTTPS server of all the fleet's BMCs (one process)
- `cert`: the fleet's self-signed BMC certificate

`python -m gpusim.bmc --workdir W` serves the BMCs of the fleet in W (started by `gpusim up`, stopped
by `gpusim down`; pid in W/bmc/bmc.pid, log in W/bmc/bmc.log).
"""
