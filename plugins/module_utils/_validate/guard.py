# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate's guard: the checks that load the GPUs run only on a node that runs no job and is drained (private).

``cuda_smoke``, ``dcgm_diag``, ``nccl_busbw`` and ``gpu_burn`` (the ``standard`` and ``full`` levels) take every GPU
of the node: on a node that runs a job they disturb it (and measure it, not the node), and on a node a scheduler may
give work to, a job can start under them. So they run only when nvidia-smi lists no compute process and the node is
known to be drained: Slurm says so (``scontrol show node``: DRAIN and no job left), or the caller does (``drained``).
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import parse_show_node

# Processes nvidia-smi lists with this type draw only (a display server); every other type (C, C+G, M...) computes.
_GRAPHICS_ONLY = "G"
_LISTED = 5


class NodeInUseError(GpufleetError):
    """Checks that load the GPUs were asked of a node that runs compute processes or is not known to be drained."""


def compute_processes(processes):
    """The processes of gpu_facts' ``gpu_processes`` that compute on a GPU; one of unknown type counts as computing."""
    return [p for p in processes or [] if not (isinstance(p, dict) and p.get("type") == _GRAPHICS_ONLY)]


def slurm_drain(record):
    """``(node name, drained, state)`` from ``scontrol show node -o NODE`` output.

    NodeInUseError when it cannot be read (scontrol missing or failing prints nothing): an unknown state is no drain.
    """
    try:
        node = parse_show_node(record)
    except (ParseError, RecursionError, UnicodeError) as exc:
        raise NodeInUseError(
            f"slurm_node_record is not the node's scontrol show node output ({exc}): the checks that load the GPUs run only on a "
            "node known to be drained. Check that scontrol answers where the role runs it (gpu_validate_slurm_client, "
            "gpu_validate_slurm_environment), or run level quick"
        ) from exc
    return node["name"], node["drain_state"] == "drained", node["state"]


def _process_list(busy):
    listed = ", ".join(
        "pid {} {} on GPU {}".format(p.get("pid"), p.get("name") or "(unnamed)", p.get("gpu_index")) if isinstance(p, dict) else repr(p)
        for p in busy[:_LISTED]
    )
    return listed + (f" and {len(busy) - _LISTED} more" if len(busy) > _LISTED else "")


def load_refusal(node, load_checks, processes, drained, state=None):
    """None when ``load_checks`` may run on ``node``, else why not and what to do.

    ``processes``: gpu_facts' ``gpu_processes`` (None when nvidia-smi could not tell); ``drained``: True, False or None
    (unknown); ``state``: the node's Slurm state, for the message.
    """
    if not load_checks:
        return None
    checks = ", ".join(load_checks)
    busy = compute_processes(processes)
    if busy:
        return (
            f"{node}: {len(busy)} compute process(es) run on its GPUs ({_process_list(busy)}); {checks} load every GPU and would "
            "disturb them. Nothing was run: drain the node and let its jobs end (the upgrade drains its nodes itself), "
            "or run level quick (read-only)"
        )
    if drained is True:
        return None
    why = f"Slurm shows it {state}, not drained with no job left" if state else (
        "it is not drained" if drained is False else "whether it is drained is not known")
    drain = f"scontrol update NodeName={node} State=DRAIN Reason=validate"
    return (
        f"{node}: {why}; {checks} load every GPU, and a job the scheduler starts meanwhile would fail or be measured. "
        f"Nothing was run: drain it first ({drain}) and wait for its jobs to end, or run level quick (read-only); "
        "where no Slurm schedules the node, set gpu_validate_drained: true (module option drained) once it is out of service"
    )


__all__ = ["NodeInUseError", "compute_processes", "load_refusal", "slurm_drain"]
