"""Simulated `dcgmi diag -r 1|2|3|4 [-j]` (DCGM 3.x text table, 4.x JSON schema) and
`dcgmi discovery -l`."""

from __future__ import annotations

import json
import textwrap

from .. import catalog
from .. import state as st
from ._common import fail, load, out, scaled_sleep

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

DEPLOYMENT = ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
              "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom")
# level -> [(category, [tests])] beyond Deployment
LEVEL_TESTS = {
    1: [],
    2: [("Integration", ["PCIe"]), ("Hardware", ["GPU Memory"])],
    3: [("Integration", ["PCIe"]), ("Hardware", ["GPU Memory", "Diagnostic"]),
        ("Stress", ["Targeted Stress", "Targeted Power", "Memory Bandwidth", "EUD Test"])],
    4: [("Integration", ["PCIe"]), ("Hardware", ["GPU Memory", "Diagnostic", "Pulse Test"]),
        ("Stress", ["Targeted Stress", "Targeted Power", "Memory Bandwidth", "Memtest", "EUD Test"])],
}
JSON_NAMES = {"PCIe": "pcie", "GPU Memory": "memory", "Diagnostic": "diagnostic", "Targeted Stress": "targeted_stress",
              "Targeted Power": "targeted_power", "Memory Bandwidth": "memory_bandwidth", "EUD Test": "eud",
              "Pulse Test": "pulse_test", "Memtest": "memtest"}
USAGE = ("\n dcgmi diag --run <diag level> [--json] ...\n\nERROR: -r/--run requires a value: 1, 2, 3, 4 or a test name.")


def _row(left: str, right: str) -> list[str]:
    chunks = textwrap.wrap(right, 46, drop_whitespace=False, break_on_hyphens=False) or [""]
    lines = [f"| {left:<25} | {chunks[0]:<46} |"]
    lines += [f"| {'':<25} | {c:<46} |" for c in chunks[1:]]
    return lines


def _results(state: dict[str, Any], level: int) -> list[tuple[str, list[tuple[str, str, list[tuple[int, str]]]]]]:
    """[(category, [(test, status pass|fail|skip, [(gpu, warning)])])]"""
    gpus = st.visible_gpus(state)
    f = st.fault(state, "dcgm_fail")
    fail_test = (f or {}).get("test", "GPU Memory" if level >= 2 else "Page Retirement/Row Remap")
    fail_gpu = int((f or {}).get("gpu", 0))
    cats: list[tuple[str, list[tuple[str, str, list[tuple[int, str]]]]]] = []
    dep = []
    for t in DEPLOYMENT:
        status, warns = "pass", []
        if t == "Persistence Mode" and not state["services"]["nvidia-persistenced"]["active"]:
            warns = [(g["index"], f"Persistence mode for GPU {g['index']} is disabled. Enable persistence mode by "
                                  'running "nvidia-smi -i <gpuId> -pm 1 " as root.') for g in gpus]
        if t == "Page Retirement/Row Remap":
            pend = [g for g in gpus if g["remapped"]["pending"] or g["retired"]["pending"]]
            if pend:
                status = "fail"
                warns = [(g["index"], f"GPU {g['index']} had uncorrectable memory errors and row remappings are "
                                      "pending. Run nvidia-smi -r to reset the GPU.") for g in pend]
        if t == "Graphics Processes" and state["processes"]:
            status = "fail"
            warns = [(p["gpu"], f"GPU {p['gpu']} has a process {p['pid']} running on it.") for p in state["processes"]]
        if f and t == fail_test:
            status = "fail"
            warns = [(fail_gpu, f"GPU {fail_gpu} {t} check failed.")]
        dep.append((t, status, warns))
    cats.append(("Deployment", dep))
    for cat, tests in LEVEL_TESTS[level]:
        rows = []
        for t in tests:
            status, warns = ("skip" if t == "EUD Test" else "pass"), []
            if f and t == fail_test:
                status = "fail"
                if t == "GPU Memory":
                    warns = [(fail_gpu, f"GPU {fail_gpu} Error using CUDA API cuInit Check DCGM and system logs for "
                                        "errors. Reset GPU. Restart DCGM. Rerun diagnostics. Unable to initialize "
                                        "CUDA library: 'system not yet initialized'. ")]
                else:
                    warns = [(fail_gpu, f"GPU {fail_gpu} {t} test failed: observed throughput below the expected "
                                        "threshold.")]
            rows.append((t, status, warns))
        cats.append((cat, rows))
    return cats


def _text(state: dict[str, Any], cats: list, gpus: list[dict[str, Any]]) -> str:
    model = catalog.gpu_model(state["gpu_model"])
    sep = "+---------------------------+------------------------------------------------+"
    lines = ["Successfully ran diagnostic for group.", sep,
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+",
             "|-----  Metadata  ----------+------------------------------------------------|"]
    lines += _row("DCGM Version", catalog.DCGM_VERSION)
    lines += _row("Driver Version Detected", state["driver"]["version"])
    lines += _row("GPU Device IDs Detected", ",".join(f"{model.device_id:04x}" for _ in gpus))
    for cat, tests in cats:
        if cat == "Deployment":
            lines.append("|-----  Deployment  --------+------------------------------------------------|")
        else:
            lines.append(f"+-----  {cat}  " + "-" * (20 - len(cat)) + "+------------------------------------------------+")
        for test, status, warns in tests:
            name = test
            if cat == "Deployment":
                word = status.capitalize()
            elif status == "fail":
                bad = sorted({g for g, _ in warns})
                ok = [g["index"] for g in gpus if g["index"] not in bad]
                word = "Fail - All" if not ok else f"Pass - GPUs: {', '.join(map(str, ok))}"
                if ok:
                    lines += _row(name, word)
                    word = f"Fail - GPU: {', '.join(map(str, bad))}"
                    name = ""
            else:
                word = f"{status.capitalize()} - All"
            lines += _row(name, word)
            for _g, w in warns:
                lines += _row("Warning" if status == "fail" else "Info", w)
    lines.append(sep)
    return "\n".join(lines) + "\n"


def _json(state: dict[str, Any], cats: list, gpus: list[dict[str, Any]]) -> str:
    model = catalog.gpu_model(state["gpu_model"])
    categories = []
    for cat, tests in cats:
        jt = []
        for name, status, warns in tests:
            results = []
            for g in gpus:
                mine = [w for gi, w in warns if gi == g["index"]]
                s = status if (mine or status != "fail") else "pass"
                r: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": g["index"], "status": s.capitalize()}
                if mine:
                    r["warnings"] = [{"error_category": 1, "error_id": 95, "error_severity": 2, "warning": w} for w in mine]
                results.append(r)
            jt.append({"name": JSON_NAMES.get(name, name), "results": results,
                       "test_summary": {"status": status.capitalize()}})
        categories.append({"category": cat, "tests": jt})
    doc = {
        "DCGM Diagnostic": {"test_categories": categories},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                           "entities": [{"device_id": f"{model.device_id:04x}", "entity_id": g["index"],
                                         "serial_num": g["serial"]} for g in gpus]}],
        "metadata": {"Driver Version Detected": state["driver"]["version"], "version": catalog.DCGM_VERSION},
    }
    return json.dumps(doc, indent=4) + "\n"


def _discovery(state: dict[str, Any]) -> str:
    model = catalog.gpu_model(state["gpu_model"])
    gpus = st.visible_gpus(state)
    sep = "+--------+----------------------------------------------------------------------+"
    lines = [f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.", sep,
             "| GPU ID | Device Information                                                   |", sep]
    for n, g in enumerate(gpus):
        lines += [f"| {n:<6} | {'Name: ' + model.name:<68} |", f"| {'':<6} | {'PCI Bus ID: ' + g['pci_bus_id']:<68} |",
                  f"| {'':<6} | {'Device UUID: ' + g['uuid']:<68} |", sep]
    nsw = 4 if state["nvswitch"] else 0
    lines += [f"{nsw} NvSwitch{'es' if nsw != 1 else ''} found.", "+-----------+", "| Switch ID |", "+-----------+"]
    lines += [f"| {10 + i:<9} |" for i in range(nsw)]
    lines += ["+-----------+", f"{len(state['nics'])} ConnectX found.", "+----------+", "| ConnectX |", "+----------+"]
    lines += [f"| {i:<8} |" for i in range(len(state["nics"]))]
    lines += ["+----------+", "0 CPUs found.", sep,
              "| CPU ID | Device Information                                                   |", sep, sep]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    state = load()
    if not argv:
        fail(" dcgmi subsystem [arguments]\n\nERROR: a subsystem is required.", 1)
    if argv[0] == "--version":  # the client's own version, as real dcgmi prints it (no host engine needed)
        out(f"\ndcgmi  version: {catalog.DCGM_VERSION}\n")
        return 0
    if not st.driver_loaded(state) or not state["services"]["nvidia-dcgm"]["active"]:
        fail("Error: unable to establish a connection to the specified host: localhost\n"
             "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.", 255, "out")
    sub, args = argv[0], argv[1:]
    if sub == "discovery":
        if not ({"-l", "--list"} & set(args)):
            fail("ERROR: discovery requires one of -l/--list, -i/--info", 1)
        out(_discovery(state), end="")
        return 0
    if sub == "-v":  # the client's and the running host engine's build info
        build = f"Version : {catalog.DCGM_VERSION}\nBuild ID : 1\nBranch Name : v{catalog.DCGM_VERSION}\nCPU Arch : x86_64"
        out(f"\nLocal build info:\n{build}\n\nHostengine build info:\n{build}")
        return 0
    if sub != "diag":
        fail(f"ERROR: unknown subsystem {sub!r}", 1)
    level = None
    as_json = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-r", "--run"):
            i += 1
            level = args[i] if i < len(args) else None
        elif a.startswith("--run="):
            level = a.split("=", 1)[1]
        elif a in ("-j", "--json"):
            as_json = True
        elif a in ("--fail-early", "-v", "--verbose"):
            pass
        elif a in ("-i", "-g", "--group", "-p", "--parameters", "--iterations"):
            i += 1
        else:
            fail(f"PARSE ERROR:  \n             Argument: {a}\n             Couldn't find match for argument\n{USAGE}", 1)
        i += 1
    names = {"short": 1, "medium": 2, "long": 3, "xlong": 4}
    if level is None or not (level in ("1", "2", "3", "4") or level in names):
        fail(USAGE, 1)
    lvl = int(names.get(level, level))
    scaled_sleep(state["timing"]["diag"].get(str(lvl), 0))
    state = load()
    gpus = st.visible_gpus(state)
    cats = _results(state, lvl)
    out(_json(state, cats, gpus) if as_json else _text(state, cats, gpus), end="")
    failed = any(s == "fail" for _c, tests in cats for _n, s, _w in tests)
    return 226 if failed else 0
