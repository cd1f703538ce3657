"""What the audit's report play costs the controller over many nodes, through Ansible: the module against the action.

Needs root and tests/gpusim/install-deps.sh (one simulated HGX H100 node gives the gpu_facts result). Usage:
    .venv/bin/python bench/bench_audit_report.py [--sizes 1000 (default) 10000]
Brings up one simulated node (127.0.125.1, slurmctld on 16350), registers its gpu_facts result (about 25 KB of facts), then
for each size runs playbooks/audit.yml from its second play (--start-at-task: no node is contacted) over that many
synthetic hosts on the local connection, each with that result registered (one copy in the inventory's group variables),
no BMC credentials. Twice: with the fleet_report task run in the controller's worker by its action plugin (the default
on the controller), and as a module (the action's fallback, forced here with become through su). Prints, for each, the
report task's seconds (ansible.posix.profile_tasks), the playbook's wall and controller CPU seconds, the largest
controller process's peak memory, and checks that both wrote the same report.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_audit  # noqa: E402  (the simulated HGX H100 SKU of the audit bench)

BIN = REPO / ".venv" / "bin"
REPORT_TASK = "Compare the fleet with its BOMs and write the report"
GATHER = [{"name": "Register one node's gpu_facts", "hosts": "gpu_nodes", "gather_facts": False,
           "tasks": [{"name": "Gather GPU facts", "gpufleet.lifecycle.gpu_facts": {}, "register": "gathered"},
                     {"name": "Keep it", "ansible.builtin.copy": {"content": "{{ gathered | to_json }}", "dest": "{{ result_file }}", "mode": "0600"},
                      "delegate_to": "localhost"}]}]
# The module path of the action plugin (plugins/plugin_utils/_in_process.py): become, here su to root as root.
AS_MODULE = ["-e", "ansible_become=true", "-e", "ansible_become_method=su", "-e", "ansible_become_user=root"]


def one_node_result(tmp: pathlib.Path) -> tuple[dict, dict]:
    """(the registered gpu_facts result of one simulated HGX H100 node, its SKU's BOM)."""
    spec = bench_audit.spec(1)
    spec["fleet"].update(name="bench-audit-report", loopback=125, slurm_port=16350)
    (tmp / "spec.yml").write_text(yaml.safe_dump(spec))
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests"))
    gpusim = [sys.executable, "-m", "gpusim"]
    fleet = tmp / "fleet"
    subprocess.run([*gpusim, "up", "--spec", str(tmp / "spec.yml"), "--workdir", str(fleet)], env=env, check=True, capture_output=True)
    try:
        (tmp / "gather.yml").write_text(yaml.safe_dump(GATHER, sort_keys=False))
        ansible_env = dict(os.environ, ANSIBLE_CONFIG=str(fleet / "ansible.cfg"), ANSIBLE_HOST_KEY_CHECKING="False",
                           ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}")
        subprocess.run([str(BIN / "ansible-playbook"), "-i", str(fleet / "inventory" / "hosts.yml"), str(tmp / "gather.yml"),
                        "-e", f"result_file={tmp / 'result.json'}"], env=ansible_env, check=True, capture_output=True)
    finally:
        subprocess.run([*gpusim, "down", "--workdir", str(fleet)], env=env, check=False, capture_output=True)
    return json.loads((tmp / "result.json").read_text()), spec["skus"]["hgx_h100"]["bom"]


def run_report(tmp: pathlib.Path, size: int, result: dict, bom: dict, extra: list[str]) -> dict:
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "gpufleet_sku": "hgx_h100", "gpufleet_bom": bom, "gpufleet_audit_gathered": result},
                         "children": {"gpu_nodes": {"hosts": {f"gpu-{i:05d}": None for i in range(size)}}}}}
    (tmp / "hosts.yml").write_text(json.dumps(inventory))  # JSON is YAML: the inventory plugin reads it fast
    report_dir = tmp / f"report-{size}-{'module' if extra else 'action'}"
    env = dict(os.environ, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", ANSIBLE_HOST_KEY_CHECKING="False",
               ANSIBLE_COLLECTIONS_PATH=f"{REPO / '.collections'}:{REPO / '.venv/lib/python3.11/site-packages'}")
    cmd = [str(BIN / "ansible-playbook"), "-i", str(tmp / "hosts.yml"), str(REPO / "playbooks" / "audit.yml"),
           "--start-at-task", "Read the BMCs' firmware inventories out of band", "-e", f"gpufleet_report_dir={report_dir}", *extra]
    cpu_before = bench_audit.children_cpu_s()
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    cpu = bench_audit.children_cpu_s() - cpu_before
    if done.returncode != 0:
        raise SystemExit(f"audit.yml failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    task = re.search(rf"^{re.escape(REPORT_TASK)} -+ ([0-9.]+)s$", done.stdout, re.M)
    report = json.loads((report_dir / "fleet-report.json").read_text())
    if report["totals"]["nodes"] != size:
        raise SystemExit(f"the report counts {report['totals']} for {size} hosts")
    report.pop("generated_at", None)
    return {"report_task_s": float(task.group(1)) if task else None, "playbook_s": round(wall, 2),
            "controller_cpu_s": round(cpu, 2), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
            "report": report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000])
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_audit_report.py needs root (gpusim, and su for the module path): not run")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-audit-report-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        result, bom = one_node_result(tmp)
        facts_kb = len(json.dumps(result["ansible_facts"]["gpufleet"])) / 1024
        print(f"one node's gpu_facts: {facts_kb:.1f} KB of facts; load average {os.getloadavg()[0]:.2f} at start")
        for size in args.sizes:
            runs = {"action": run_report(tmp, size, result, bom, []), "module": run_report(tmp, size, result, bom, AS_MODULE)}
            same = runs["action"].pop("report") == runs["module"].pop("report")
            print(json.dumps({"hosts": size, **runs, "same_report": same}), flush=True)
            if not same:
                raise SystemExit("the action and the module wrote different reports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
