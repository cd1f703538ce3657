"""The gpusim command line: up, down, status, fault, clear-faults, power-on."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpusim import fleet
from gpusim.spec import SpecError


def _print(message: str) -> None:
    sys.stdout.write(message + "\n")


def _status(args: argparse.Namespace) -> int:
    rows = fleet.status(args.workdir)
    if args.json:
        _print(json.dumps(rows, indent=1))
        return 0
    columns = ("name", "address", "bmc_address", "sku", "power", "boot_id", "driver", "slurm")
    table = [columns] + [tuple("-" if row[c] is None else str(row[c]) for c in columns) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        _print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    return 0


def _fault(args: argparse.Namespace) -> int:
    fleet.fault(args.workdir, args.node, args.kind, fleet.parse_params(args.params))
    _print(f"gpusim: fault {args.kind} applied to {args.node}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpusim", description="Simulated GPU fleet: one sshd, namespace and slurmd per node.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument("--workdir", type=Path, default=fleet.DEFAULT_WORKDIR,
                         help=f"where the fleet lives (default {fleet.DEFAULT_WORKDIR})")
        return cmd

    cmd = add("up", "bring up the fleet of a spec and write its Ansible inventory")
    cmd.add_argument("--spec", required=True, type=Path, help="fleet spec YAML (see tests/gpusim/README.md)")
    cmd.set_defaults(func=lambda a: fleet.up(a.spec, a.workdir) and 0)

    cmd = add("down", "stop every process of the fleet and remove its workdir")
    cmd.set_defaults(func=lambda a: fleet.down(a.workdir) or 0)

    cmd = add("status", "per node: power (up/down/rebooting), boot_id, driver, Slurm state")
    cmd.add_argument("--json", action="store_true", help="print JSON")
    cmd.set_defaults(func=_status)

    cmd = add("fault", "inject a fault into a node's state now")
    cmd.add_argument("node")
    cmd.add_argument("kind", help="a fault kind (gpusim.state.FAULT_KINDS)")
    cmd.add_argument("params", nargs="*", metavar="key=value", help="fault parameters (values read as YAML scalars)")
    cmd.set_defaults(func=_fault)

    cmd = add("clear-faults", "remove a node's standing and pending faults (all, or one kind)")
    cmd.add_argument("node")
    cmd.add_argument("kind", nargs="?", default=None)
    cmd.set_defaults(func=lambda a: fleet.clear_faults(a.workdir, a.node, a.kind) and 0)

    cmd = add("power-on", "start a node that is down (powered off or did not come back)")
    cmd.add_argument("node")
    cmd.set_defaults(func=lambda a: fleet.power_on(a.workdir, a.node) or 0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (SpecError, fleet.FleetError) as exc:
        sys.stderr.write(f"gpusim: {exc}\n")
        return 2
    except RuntimeError as exc:  # a node that did not boot, a daemon that stalled: the message names it, with its log
        message = str(exc)
        sys.stderr.write(message if message.startswith("gpusim:") else f"gpusim: {message}")
        sys.stderr.write("\n")
        return 1
