"""`python -m gpusim.bmc --workdir W`: serve the BMCs of the fleet in W until SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from .server import Endpoint, Server

BMC_DIR = "bmc"
PID_FILE = "bmc.pid"


def _log(message: str) -> None:
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {message}\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpusim.bmc", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    record = json.loads((workdir / "fleet.json").read_text())
    bmc = workdir / BMC_DIR
    creds = json.loads((bmc / "credentials.json").read_text())
    endpoints = [Endpoint(r["name"], Path(r["node_dir"]), r["bmc_address"], int(record["bmc_port"]))
                 for r in record["nodes"]]
    server = Server(endpoints, creds["user"], creds["password"], bmc / "cert.pem", bmc / "key.pem", log=_log)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    (bmc / PID_FILE).write_text(f"{os.getpid()}\n")
    _log(f"serving {len(endpoints)} BMCs on port {record['bmc_port']}")
    try:
        server.serve_forever()
    finally:
        with contextlib.suppress(FileNotFoundError):
            (bmc / PID_FILE).unlink()
        _log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
