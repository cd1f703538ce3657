# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CUDA / driver / GPU compatibility filters of gpufleet.lifecycle.

The documentation of each filter is in the adjacent <filter_name>.yml file; the rules and data
are in plugins/module_utils/_compat.py and _compat_data.py, shared with the modules.
"""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat

_PREFIX = "gpufleet.lifecycle."


def _filter(name, function):
    """Wrap a _compat function so that its CompatError names the filter's full name."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except _compat.CompatError as exc:
            raise AnsibleFilterError(f"{_PREFIX}{name}: {exc}") from exc
        except TypeError as exc:  # wrong number or names of arguments in the template
            raise AnsibleFilterError(f"{_PREFIX}{name}: {exc}") from exc

    return wrapper


def bom_violations(bom, gpu_names, cuda_versions, today=None, compat="toolkit", os="linux"):
    """check_bom under the filter's name (the filter's input is the BOM)."""
    return _compat.check_bom(bom, gpu_names, cuda_versions, today=today, compat=compat, os=os)


_FILTERS = {
    "cuda_min_driver": _compat.cuda_min_driver,
    "driver_supports_cuda": _compat.driver_supports_cuda,
    "max_cuda_for_driver": _compat.max_cuda_for_driver,
    "driver_branch": _compat.driver_branch,
    "branch_info": _compat.branch_info,
    "gpu_compute_capability": _compat.gpu_compute_capability,
    "gpu_architecture": _compat.gpu_architecture,
    "driver_supports_gpu": _compat.driver_supports_gpu,
    "cuda_supports_gpu": _compat.cuda_supports_gpu,
    "bom_violations": bom_violations,
}


class FilterModule:
    """gpufleet.lifecycle compatibility filters."""

    def filters(self):
        return {name: _filter(name, function) for name, function in _FILTERS.items()}
