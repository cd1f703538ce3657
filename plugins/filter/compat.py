# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CUDA / driver / GPU compatibility filters of gpufleet.lifecycle.

The documentation of each filter is in the adjacent <filter_name>.yml file; the rules and data
are in plugins/module_utils/_compat.py and _compat_data.py, shared with the modules.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_compat = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._compat")

_PREFIX = "gpufleet.lifecycle."


def _filter(name, function):
    """Wrap a _compat function (or its name in _compat, looked up when the filter runs: lazy_module) so that its
    CompatError names the filter's full name."""

    def wrapper(*args, **kwargs):
        try:
            return (getattr(_compat, function) if isinstance(function, str) else function)(*args, **kwargs)
        except _compat.CompatError as exc:
            raise AnsibleFilterError(f"{_PREFIX}{name}: {exc}") from exc
        except TypeError as exc:  # wrong number or names of arguments in the template
            raise AnsibleFilterError(f"{_PREFIX}{name}: {exc}") from exc

    wrapper.__name__ = wrapper.__qualname__ = name
    return wrapper


def bom_violations(bom, gpu_names, cuda_versions, today=None, compat="toolkit", os="linux"):
    """check_bom under the filter's name (the filter's input is the BOM)."""
    return _compat.check_bom(bom, gpu_names, cuda_versions, today=today, compat=compat, os=os)


_FILTERS = {
    "cuda_min_driver": "cuda_min_driver",
    "driver_supports_cuda": "driver_supports_cuda",
    "max_cuda_for_driver": "max_cuda_for_driver",
    "driver_branch": "driver_branch",
    "branch_info": "branch_info",
    "gpu_compute_capability": "gpu_compute_capability",
    "gpu_architecture": "gpu_architecture",
    "driver_supports_gpu": "driver_supports_gpu",
    "cuda_supports_gpu": "cuda_supports_gpu",
    "bom_violations": bom_violations,
}


class FilterModule:
    """gpufleet.lifecycle compatibility filters."""

    def filters(self):
        return {name: _filter(name, function) for name, function in _FILTERS.items()}
