"""Simulated benchmarks: nccl-tests `all_reduce_perf` and `gpu_burn`."""

from __future__ import annotations

import os

from .. import catalog
from .. import state as st
from ._common import fail, load, out, scaled_sleep

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

NO_CUDA = "Failed: Cuda error common.cu:1000 'system not yet initialized'"


def _size(tok: str) -> int:
    tok = tok.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if tok and tok[-1].upper() in mult:
        return int(float(tok[:-1]) * mult[tok[-1].upper()])
    return int(tok)


def _peak_busbw(state: dict[str, Any]) -> float:
    perf = state["perf"].get("nccl_busbw_gbps")
    if perf:
        peak = float(perf)
    else:
        model = catalog.gpu_model(state["gpu_model"])
        peak = model.nvlinks * model.nvlink_gbps * (0.95 if state["nvswitch"] else 0.5) or 24.0
    f = st.fault(state, "nccl_low")
    if f:
        peak *= float(f.get("factor", 0.4))
    return peak


def nccl_main(argv: list[str]) -> int:
    state = load()
    opts = {"b": "32M", "e": "32M", "f": "2", "g": "1", "c": "1", "n": "20", "w": "5", "t": "1", "i": "0"}
    long = {"--minbytes": "b", "--maxbytes": "e", "--stepfactor": "f", "--ngpus": "g", "--check": "c",
            "--iters": "n", "--warmup_iters": "w", "--nthreads": "t", "--stepbytes": "i"}
    i = 0
    while i < len(argv):
        a = argv[i]
        key = long.get(a) or (a[1:] if a.startswith("-") and len(a) == 2 and a[1] in opts else None)
        if a in ("-h", "--help"):
            out("USAGE: all_reduce_perf \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t"
                "[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t"
                "[-i,--stepbytes <increment size>] \n\t[-f,--stepfactor <increment factor>] ")
            return 0
        if key is None or i + 1 >= len(argv):
            fail(f"all_reduce_perf: invalid option -- '{a.lstrip('-')}'\nUSAGE: all_reduce_perf ...", 1)
        opts[key] = argv[i + 1]
        i += 2
    if not st.driver_loaded(state):
        fail(NO_CUDA, 1, "out")
    gpus = [g for g in st.visible_gpus(state) if not g["fell_off"]]
    ngpus = int(opts["g"])
    if ngpus > len(gpus):
        out(f"# nThread 1 nGpus {ngpus} ...")
        fail(f"{state['name']}: Test CUDA failure common.cu:892 'invalid device ordinal'\n .. {state['name']} pid "
             f"{os.getpid()}: Test failure common.cu:1017", 2, "out")
    minb, maxb, factor = _size(opts["b"]), _size(opts["e"]), int(opts["f"])
    scaled_sleep(state["timing"].get("nccl", 0))
    model = catalog.gpu_model(state["gpu_model"])
    pid = os.getpid()
    lines = [f"# nThread {opts['t']} nGpus {ngpus} minBytes {minb} maxBytes {maxb} step: {factor}(factor) "
             f"warmup iters: {opts['w']} iters: {opts['n']} agg iters: 1 validation: {opts['c']} graph: 0",
             "#", "# Using devices"]
    for r, g in enumerate(gpus[:ngpus]):
        bus = g["pci_bus_id"].split(":")[1].lower()
        lines.append(f"#  Rank {r:2d} Group  0 Pid {pid:6d} on {state['name']:>10} device {r:2d} [0x{bus}] {model.name}")
    lines += ["#",
              "#                                                              out-of-place                       in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    peak = _peak_busbw(state)
    n = max(ngpus, 1)
    ratio = 2.0 * (n - 1) / n if n > 1 else 1.0
    sizes = []
    s = minb
    while s <= maxb:
        sizes.append(s)
        if factor <= 1:
            break
        s *= factor
    total = 0.0
    for raw_size in sizes:
        size = raw_size - raw_size % 4
        count = size // 4
        # latency-bound at small sizes, peak at large ones
        bw = peak * size / (size + 8 * 1024 * 1024) if n > 1 else 0.0
        t_us = (size / (bw / ratio * 1e3) if bw else 0.5) + 10.0
        algbw = size / t_us / 1e3
        busbw = algbw * ratio if n > 1 else 0.0
        total += busbw
        wrong = "0" if opts["c"] != "0" else "N/A"
        lines.append(f"{size:12d}  {count:12d}     float     sum      -1  {t_us:7.1f}  {algbw:6.2f}  {busbw:6.2f}  "
                     f"{wrong:>5}  {t_us:7.1f}  {algbw:6.2f}  {busbw:6.2f}  {wrong:>5}")
    avg = total / len(sizes) if sizes else 0.0
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g}", "#"]
    out("\n".join(lines))
    return 0


def burn_main(argv: list[str]) -> int:
    state = load()
    doubles = tensor = False
    seconds = 10
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-d":
            doubles = True
        elif a == "-tc":
            tensor = True
        elif a in ("-m", "-i", "-c"):
            i += 1
        elif a == "-h":
            out("GPU Burn\nUsage: gpu_burn [OPTIONS] [TIME]\n\n-m X\tUse X MB of memory.\n-d\tUse doubles\n"
                "-tc\tTry to use Tensor cores\n-l\tLists all GPUs in the system\n-h\tShow this help message")
            return 0
        elif a.lstrip("-").isdigit() and not a.startswith("-"):
            seconds = int(a)
        else:
            fail(f"Syntax error near `{a}'", 1, "out")
        i += 1
    if not st.driver_loaded(state):
        fail("Couldn't init a GPU test: Error: CUDA_ERROR_NO_DEVICE", 1, "out")
    model = catalog.gpu_model(state["gpu_model"])
    gpus = [g for g in st.visible_gpus(state) if not g["fell_off"]]
    thermal = {g["index"] for g in gpus if g.get("thermal_slowdown")}
    bad = {g["index"] for g in gpus if g["ecc"]["volatile_dbe"] > 0}
    lines = [f"Burning for {seconds} seconds."]
    lines += [f"GPU {n}: {model.name} (UUID: {g['uuid']})" for n, g in enumerate(gpus)]
    mb = model.memory_mib - model.reserved_mib
    kind = "DOUBLES" if doubles else "FLOATS"
    for n, _g in enumerate(gpus):
        lines.append(f"Initialized device {n} with {model.memory_mib} MB of memory ({mb} MB available, using "
                     f"{int(mb * 0.9)} MB of it), using {kind}" + (", using Tensor Cores" if tensor else ""))
    lines.append("Results are 268435456 bytes each, thus performing 25 iterations")
    scaled_sleep(state["timing"].get("burn", 0))
    base = model.tflops_fp32 * 1000 * (0.5 if doubles else 1.0) * (2.0 if tensor else 1.0) * 0.7
    for pct in (50.0, 100.0):
        procd, errs, temps = [], [], []
        for n, g in enumerate(gpus):
            gf = base * (0.55 if g["index"] in thermal else 1.0)
            iters = int(gf * seconds * pct / 100 / 50)
            procd.append(f"{iters} ({gf:.0f} Gflop/s)")
            errs.append(str(17 * (n + 1) if g["index"] in bad else 0))
            temps.append(f"{g['temp_c'] + 30 if g['index'] not in thermal else 89} C")
        lines.append(f"{pct:.1f}%  proc'd: {' - '.join(procd)}   errors: {' - '.join(errs)}   temps: {' - '.join(temps)} ")
    lines += ["", "Killing processes with SIGTERM (soft kill)"]
    for n, _g in enumerate(gpus):
        lines += [f"Freed memory for dev {n}", "Uninitted cublas"]
    lines += ["done", "", f"Tested {len(gpus)} GPUs:"]
    lines += [f"\tGPU {n}: {'FAULTY' if g['index'] in bad else 'OK'}" for n, g in enumerate(gpus)]
    out("\n".join(lines))
    return 0
