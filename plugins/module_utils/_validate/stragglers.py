# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Straggler detection: nodes measurably slower than the fleet's median in the same run (private).

A node can pass every absolute threshold and still hold a whole training job back: one GPU in a
thermal slowdown makes gpu-burn's slowest Gflop/s, and so the node, lag the others. Comparing each
node with the median of the same run needs no per-SKU threshold.
"""

from __future__ import annotations

import math

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

# gpu_validate measurements compared by default: NCCL bus bandwidth, and the slowest GPU's
# Gflop/s under gpu-burn (what a thermal or power slowdown of its clocks costs).
DEFAULT_METRICS = ("busbw_gbps", "gflops_min")


class StragglerError(GpufleetError, ValueError):
    """The input is not a list or dict of per-node measurements."""


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2.0


def _measurements(entry):
    """The measurements dict of a gpu_validate result, a node record, or the measurements themselves."""
    if not isinstance(entry, dict):
        raise StragglerError(f"a node's entry must be a dict, not {type(entry).__name__}")
    if isinstance(entry.get("measurements"), dict):
        return entry["measurements"]
    if isinstance(entry.get("result"), dict) and isinstance(entry["result"].get("measurements"), dict):
        return entry["result"]["measurements"]
    return entry


def node_measurements(nodes):
    """``{name: measurements}`` from a dict (name -> result or measurements) or a list of ``{"name", ...}``."""
    if isinstance(nodes, dict):
        return {str(name): _measurements(entry) for name, entry in nodes.items()}
    if isinstance(nodes, (list, tuple)):
        found, first = {}, {}
        for index, entry in enumerate(nodes):
            if not isinstance(entry, dict) or "name" not in entry:
                raise StragglerError("each node in a list needs a 'name' and its 'measurements' (or a gpu_validate 'result')")
            name = str(entry["name"])
            if name in found:
                # Keeping one of the two would hide the other's run (a slow one behind a fast one): refuse.
                raise StragglerError(f"nodes[{index}]: node {name!r} is given twice (also nodes[{first[name]}]): give each node once")
            first[name] = index
            found[name] = _measurements(entry)
        return found
    raise StragglerError(f"expected a dict or list of nodes, not {type(nodes).__name__}")


def find_stragglers(nodes, tolerance_pct=10.0, metrics=DEFAULT_METRICS, min_nodes=3):
    """Nodes more than ``tolerance_pct`` percent below the median of a metric.

    Returns ``[{"name", "metric", "value", "median", "deficit_pct", "tolerance_pct"}]`` sorted by
    node and metric. A metric measured on fewer than ``min_nodes`` nodes is not judged (the median
    of two nodes cannot tell which one is slow). Higher is better for every metric.
    """
    if isinstance(tolerance_pct, bool):
        raise StragglerError(f"tolerance_pct must be a number, not {tolerance_pct!r}")
    try:
        tolerance = float(tolerance_pct)
    except (TypeError, ValueError) as exc:
        raise StragglerError(f"tolerance_pct must be a number, not {tolerance_pct!r}") from exc
    if not 0 <= tolerance < 100:  # also refuses nan
        raise StragglerError(f"tolerance_pct must be between 0 and 100, not {tolerance_pct!r}")
    # A string is not a list of metrics: tuple("busbw_gbps") would compare the letters and flag nobody.
    if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)) or not all(isinstance(m, str) and m for m in metrics):
        raise StragglerError(f"metrics must be a list of measurement names ({', '.join(DEFAULT_METRICS)}), not {metrics!r}")
    if isinstance(min_nodes, bool) or not isinstance(min_nodes, int) or min_nodes < 2:
        raise StragglerError(f"min_nodes must be a whole number of nodes from 2 up, not {min_nodes!r}")
    table = node_measurements(nodes)
    flagged = []
    for metric in metrics:
        values = {}
        for name, measured in table.items():
            value = measured.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if not math.isfinite(value):
                    # NaN compares false with every floor (never flagged) and makes the median NaN: no JSON either.
                    raise StragglerError(f"node {name!r}: {metric} is {value!r}, not a finite measurement: validate that node again")
                values[name] = float(value)
        if len(values) < min_nodes:
            continue
        middle = median(values.values())
        if middle <= 0:
            continue
        floor = middle * (1.0 - tolerance / 100.0)
        for name, value in values.items():
            if value < floor:
                flagged.append(
                    {
                        "name": name,
                        "metric": metric,
                        "value": value,
                        "median": round(middle, 3),
                        "deficit_pct": round((middle - value) / middle * 100.0, 1),
                        "tolerance_pct": tolerance,
                    }
                )
    return sorted(flagged, key=lambda item: (item["name"], item["metric"]))


__all__ = ["DEFAULT_METRICS", "StragglerError", "find_stragglers", "median", "node_measurements"]
