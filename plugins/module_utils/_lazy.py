# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A module imported when one of its names is first used: for this collection's filter plugins.

To find one filter of a collection, ansible-core loads the collection's filter files one after the other, in name order,
until one of them defines it, and it does so again in every worker process it forks (one per task and host): a file's
top-level imports are paid by every task that uses any filter that sorts after it. This collection's module_utils are
compiled from source each time (the collection loader keeps no bytecode). Measured with py-spy on the 13-node rollout
of tests/integration/test_rollout.py: importing them was a third of the controller's worker CPU. A filter file imports
its logic through lazy_module, so only the filter that runs pays for its own.
"""

from __future__ import annotations

import importlib


class LazyModule:
    """Stands for the module named ``name``; the first attribute asked for imports it (once per process: sys.modules)."""

    __slots__ = ("_lazy_name",)

    def __init__(self, name: str):
        self._lazy_name = name

    def __getattr__(self, attr: str):
        if attr == "_lazy_name":  # not set yet (a copy being made): no import, no recursion
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._lazy_name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name}>"


def lazy_module(name: str) -> LazyModule:
    """A stand-in for ``import name`` that imports it on first use."""
    return LazyModule(name)
