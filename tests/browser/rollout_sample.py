"""A synthetic rollout's records and plan, shaped as the rollout writes them (for the report's tests and bench).

``sample_rollout(24, rollback=("gpu-07",))``: a canary, then waves of 10 %, 25 %, 100 % of the rest
(as ``wave_plan`` would cut them), each node going through preflight, admission, drain, NIC and GPU
firmware, driver, activate, validate, resume (the canary also soaks); a node in ``rollback`` fails
validation with an Xid and is rolled back (decided by validate, validated after); a node in
``drained`` fails its rollback too and stays drained; a node in ``skipped`` was drained by others.
Deterministic: same arguments, same records.
"""

from __future__ import annotations

T0 = 1764590000.0
OLD = {"driver": "570.124.06", "fabricmanager": "570.124.06", "gpu_firmware": "HGX-22.10-1", "nic_firmware": {"MT_0000000838": "28.41.1000"}}
NEW = {"driver": "580.95.05", "fabricmanager": "580.95.05", "gpu_firmware": "HGX-24.12-1", "nic_firmware": {"MT_0000000838": "28.43.1014"}}
# (phase, seconds) of one node, in order; the canary adds a soak after resume.
STEPS = (("preflight", 20), ("admission", 5), ("drain", 90), ("nic_firmware", 140), ("gpu_firmware", 300), ("driver", 180),
         ("activate", 240), ("validate", 150), ("resume", 10))


def node_name(index, width=2):
    return f"gpu-{index:0{width}d}"


def wave_sizes(count, fractions=(0.10, 0.25, 1.0)):
    """Ansible ``serial`` sizes for ``count`` nodes after a canary of 1 (the last size repeats)."""
    sizes, left, i = [], count, 0
    while left > 0:
        size = max(1, int(count * fractions[min(i, len(fractions) - 1)]))
        size = min(size, left)
        sizes.append(size)
        left -= size
        i += 1
    return sizes


def sample_rollout(count=24, rollback=(), drained=(), skipped=(), rollout_id="r-1a2b3c4d5e", secret_url=None, width=None):
    """``(records, plan)``. ``secret_url``: put that URL (a BMC URL with a password, by mistake) in the first node's drain detail."""
    width = width or max(2, len(str(count)))
    names = [node_name(i + 1, width) for i in range(count)]
    canary, rest = names[:1], names[1:]
    waves, start = [], 0
    for size in wave_sizes(len(rest)):
        waves.append(rest[start : start + size])
        start += size
    plan = {"canary": canary, "waves": waves, "sizes": [1] + [len(w) for w in waves], "order": names,
            "domains": {n: {"rack": f"r{i // 4 + 1}"} for i, n in enumerate(names)}, "budget": max(1, count // 10), "notes": []}
    records = []
    wave_start = T0
    for wave_index, members in enumerate([canary, *waves]):
        wave_end = wave_start
        for slot, node in enumerate(members):
            t = wave_start + (slot % 7) * 3.5  # nodes of a wave start a few seconds apart (forks)
            phases = []
            record = {"node": node, "rollout_id": rollout_id, "wave": wave_index, "domain": plan["domains"][node], "result": "upgraded",
                      "before": OLD, "after": NEW, "phases": phases, "checks": [], "rollback": None,
                      "drain": {"ours": True, "reason": f"gpufleet:{rollout_id}: upgrade"}, "skip_reason": None}
            if node in skipped:
                record.update(result="skipped", after=OLD, drain={"ours": False, "reason": "hw: DIMM replacement"},
                              skip_reason="drained by others: hw: DIMM replacement")
                phases.append({"name": "preflight", "start": t, "end": t + 20, "status": "ok", "detail": ""})
                phases.append({"name": "drain", "start": t + 20, "end": t + 21, "status": "skipped", "detail": "drained by others"})
                records.append(record)
                continue
            steps = list(STEPS) + ([("soak", 300)] if wave_index == 0 else [])
            for name, base in steps:
                seconds = base + (slot * 7 + wave_index * 3) % 23
                status, detail = "ok", ""
                if name == "drain" and secret_url and node == names[0]:
                    detail = f"capacity read from {secret_url}"
                if name == "validate" and node in (*rollback, *drained):
                    status, detail = "failed", "xid: Xid 79 since boot"
                phases.append({"name": name, "start": t, "end": t + seconds, "status": status, "detail": detail})
                t += seconds
                if status == "failed":
                    break
            record["checks"] = [{"name": "xid", "status": "pass", "message": "no critical Xid"},
                                {"name": "ecc", "status": "pass", "message": "no new uncorrectable ECC error"}]
            if node in (*rollback, *drained):
                record["checks"][0] = {"name": "xid", "status": "fail", "message": "Xid 79 since boot (GPU fell off the bus)"}
                ok = node in rollback
                phases.append({"name": "rollback", "start": t, "end": t + 600, "status": "ok" if ok else "failed",
                               "detail": "restored 570.124.06, rebooted, validated" if ok else "validation failed again after rollback"})
                t += 600
                record["rollback"] = {"decided_by": "validate", "reason": "xid: Xid 79 since boot", "result": "validated" if ok else "failed"}
                if ok:
                    record["result"], record["after"] = "rolled_back", OLD
                    phases.append({"name": "resume", "start": t, "end": t + 10, "status": "ok", "detail": ""})
                    t += 10
                else:
                    record["result"] = "failed_drained"
                    record["drain"] = {"ours": True, "reason": f"gpufleet:{rollout_id}: rollback failed: xid"}
            records.append(record)
            wave_end = max(wave_end, t)
        wave_start = wave_end + 120  # gpufleet_wave_pause_seconds
    return records, plan
