# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver role's decisions on GB200 / GB300 NVL72 trays: imex_domain_nodes, imex_nodes_config, driver_modprobe_options,
driver_param_problems and imex_verify_problems (gpufleet.lifecycle).

Documentation in the adjacent YAML file of each filter; the logic is in plugins/module_utils/_driver/imex.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_imex = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.imex")
_procfs = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.procfs")
_parse = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common")


def _call(name, func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except (_imex.ImexError, _parse.ParseError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: {exc}") from exc


def imex_domain_nodes(hostvars, hosts, domain, domain_var="nvlink_domain"):
    """The addresses (ansible_host, else the name) of the hosts among ``hosts`` whose ``domain_var`` is ``domain``, in order."""
    if not hasattr(hostvars, "get"):
        raise AnsibleFilterError("gpufleet.lifecycle.imex_domain_nodes: the input must be hostvars")
    return _call("imex_domain_nodes", _imex.domain_nodes, hostvars, list(hosts or []), domain, domain_var)


def imex_nodes_config(nodes, what="nvidia_driver_imex_nodes"):
    """The text of /etc/nvidia-imex/nodes_config.cfg for the IMEX peers ``nodes``."""
    return _call("imex_nodes_config", _imex.nodes_config_text, list(nodes) if isinstance(nodes, (list, tuple)) else nodes, what)


def driver_modprobe_options(version, cdmm=False, params=None):
    """The modprobe options file of the nvidia module's parameters (CDMM on R580+ only); empty when none is set."""
    wanted = _call("driver_modprobe_options", _imex.module_params, version, cdmm, params or {})
    return _imex.modprobe_conf_text(wanted)


def driver_param_problems(params_text, version, cdmm=False, params=None):
    """Why /proc/driver/nvidia/params (its text) does not show the parameters set: a list of sentences, [] when they read back."""
    wanted = _call("driver_param_problems", _imex.module_params, version, cdmm, params or {})
    if not wanted:
        return []
    text = params_text or ""
    loaded = _call("driver_param_problems", _procfs.parse_nvidia_params, text if text.endswith("\n") or not text else text + "\n")
    return _imex.param_problems(wanted, loaded["params"])


def imex_verify_problems(facts, driver_version, nodes, check_domain=True):
    """What is wrong on an IMEX tray after activation (fabric, IMEX version and service, IMEX domain): [{check, problem, fix}]."""
    return _call("imex_verify_problems", _imex.verify_problems, facts if hasattr(facts, "get") else {}, str(driver_version), list(nodes or []), check_domain)


class FilterModule:
    """gpufleet.lifecycle nvidia_driver filters for NVLink domains (IMEX, module parameters)."""

    def filters(self):
        return {"imex_domain_nodes": imex_domain_nodes, "imex_nodes_config": imex_nodes_config,
                "driver_modprobe_options": driver_modprobe_options, "driver_param_problems": driver_param_problems,
                "imex_verify_problems": imex_verify_problems}
