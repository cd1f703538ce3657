#!/usr/bin/env python3
"""Are the controller-side checks linear in the fleet? Prints the time at N and 4N and their ratio; asserts nothing.

Each case is one finding of the bad-input issue (issue 21, "Linear in the fleet"): a linear one stays near 4 for 4x
the input (more for small inputs where fixed costs dominate); a quadratic one nears 16.

- slurm_capacity's option checks (``check_params``): a pool of N nodes, half of them admitted;
- wave_plan with ``waves: [1]`` and domains of two nodes (one node per wave: N waves over N/2 buckets);
- the URLs in free text (``sub_urls``, what rollout_report and the download messages redact) over a hex dump of
  N x 100 characters, and the pattern it replaced over N characters, for comparison;
- bmc_inventory over N BMCs with a password each (the BMCs answer at once, 20 members each): the module as Ansible runs
  it (AnsibleModule with its "Invoked with" line, the masking, exit_json), the action plugin's path in Ansible's worker
  (the argument checks and the masking), and ansible-core's remove_values with every password - how both masked
  before - over a tenth of the BMCs, for comparison.

    .venv/bin/python bench/bench_linear.py [N]      (default 2,500: 10,000 at 4N)
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import re
import sys
import syslog
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))  # the collection as ansible_collections.gpufleet.lifecycle (make venv)

from ansible.module_utils import basic  # noqa: E402
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: E402
from ansible.module_utils.common.parameters import remove_values  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._artifact import sub_urls  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish import inventory, secrets  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.capacity import check_params  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan import plan_waves  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.modules import bmc_inventory  # noqa: E402

OLD_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def capacity(n):
    pool = [f"gpu-{i:05d}" for i in range(n)]
    params = {"pool": pool, "admit": pool[: n // 2], "max_unavailable": n, "owner_tag": "gpufleet", "wait_timeout": 60, "poll_interval": 1}
    return lambda: check_params(dict(params))


def waves_of_one(n):
    hosts = [f"gpu-{i:05d}" for i in range(n)]
    hostvars = {h: {"rack": f"r{i // 2}"} for i, h in enumerate(hosts)}
    return lambda: plan_waves(hosts, hostvars, waves=[1], spread_by=["rack"], max_per_domain=1)


def urls(n):
    text = "deadbeefcafe" * (n * 100 // 12) + " see https://user:pw@host/x?sig=1"
    return lambda: sub_urls(text, lambda url: "<url>")


def old_urls(n):
    # A hundredth of the text: the old pattern is quadratic, and at the full size it would take minutes.
    text = "deadbeefcafe" * (n // 12) + " see https://user:pw@host/x?sig=1"
    return lambda: OLD_URL.sub("<url>", text)


@contextlib.contextmanager
def _patched_args(args):
    original, basic._ANSIBLE_ARGS = basic._ANSIBLE_ARGS, json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
    try:
        yield
    finally:
        basic._ANSIBLE_ARGS = original


try:  # ansible-core >= 2.19 sets a module's arguments its own way; the global before
    from ansible.module_utils.testing import patch_module_args
except ImportError:
    patch_module_args = _patched_args


def fleet_bmcs(n):
    return [{"name": f"gpu-{i:05d}", "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", "port": 443, "user": "admin",
             "password": f"pw-{i:05d}-" + "x" * (i % 9)} for i in range(n)]


def answering_bmc(bmc, context, timeout, total_timeout, expand=True):
    entries = [{"Id": f"HGX_FW_GPU_SXM_{k}", "Name": f"HGX_FW_GPU_SXM_{k} firmware", "Version": "96.00.A5.00.01", "Updateable": True,
                "Status": {"State": "Enabled", "Health": "OK"}, "Manufacturer": "NVIDIA"} for k in range(20)]
    return {"entries": entries, "expand": "$expand=.($levels=1)", "requests": 3, "connections": 1, "seconds": 0.2}


@contextlib.contextmanager
def quiet_module():
    """The BMCs answer at once, syslog and the journal get nothing, exit_json prints into a buffer."""
    saved = (inventory.read_one, syslog.syslog, syslog.openlog, basic.has_journal)
    inventory.read_one, syslog.syslog, syslog.openlog, basic.has_journal = answering_bmc, lambda *a: None, lambda *a, **k: None, False
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        inventory.read_one, syslog.syslog, syslog.openlog, basic.has_journal = saved


def bmc_module(n):
    args = {"bmcs": fleet_bmcs(n)}

    def run():
        with quiet_module(), patch_module_args(args), contextlib.suppress(SystemExit):
            bmc_inventory.main()

    return run


def bmc_action(n):
    args = {"bmcs": fleet_bmcs(n)}

    def run():
        params = ArgumentSpecValidator(inventory.ARGUMENT_SPEC).validate(args).validated_parameters
        with quiet_module():
            secrets.masked(params, inventory.run(params))

    return run


def bmc_remove_values(n):
    n //= 10
    bmcs = fleet_bmcs(n)
    result = {"inventories": {bmc["name"]: answering_bmc(bmc, None, 0, 0) for bmc in bmcs}}
    passwords = [bmc["password"] for bmc in bmcs]
    return lambda: remove_values(result, passwords)


def best_of(run, repeat=3):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 2500
    cases = [("slurm_capacity check_params", capacity), ("wave_plan waves [1], racks of 2", waves_of_one),
             ("sub_urls over a hex dump", urls), ("(the old URL pattern, 1/100 of the text)", old_urls),
             ("bmc_inventory module, a password per BMC", bmc_module), ("bmc_inventory action in process", bmc_action),
             ("(remove_values, all passwords, 1/10 BMCs)", bmc_remove_values)]
    print(f"{'case':42} {'N=' + str(n):>12} {'4N=' + str(4 * n):>12} {'ratio':>7}")
    for label, make in cases:
        small, large = best_of(make(n)), best_of(make(4 * n))
        print(f"{label:42} {small:11.4f}s {large:11.4f}s {large / small if small else float('nan'):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
