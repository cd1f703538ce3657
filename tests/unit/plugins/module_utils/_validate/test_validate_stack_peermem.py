"""gpu_validate's peermem check (issue 24): the verdict as a table, the kernel loader's lines and modules.symbols read on
the real captures, and lsmod / modinfo output that cannot be trusted as a failed check that names the tool."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom_stack import normalize
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.stack import StackReader, module_facts
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import kmod
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import stack as stack_checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stack import peermem_verdict

from tests.conftest import real_files, real_params

DRIVER = {"loaded": True, "version": "580.95.05"}
KERNEL = "6.8.0-100-generic"
LOADED = {"loaded": True, "installed": True, "version": "580.95.05"}
NOT_LOADED = {"loaded": False, "installed": True, "version": "580.95.05"}
UNKNOWN_SYMBOL = [{"module": "nvidia_peermem", "symbol": "ib_register_peer_memory_client", "problem": "unknown", "err": -2}]

# (required, driver, module, sys_version, symbol_errors, peer_api) -> (status, words the message must hold)
CASES = {
    "not-required": ((False, DRIVER, LOADED, None, None, None), ("skip", ["does not require nvidia_peermem"])),
    "loaded-at-the-drivers-version": ((True, DRIVER, LOADED, None, None, None), ("pass", ["nvidia_peermem 580.95.05 loaded"])),
    # The loaded module's version (/sys/module) wins over the file on disk (modinfo): a driver installed but not activated.
    "loaded-module-of-another-driver": (
        (True, DRIVER, LOADED, "570.124.06", None, None), ("fail", ["nvidia_peermem 570.124.06 (/sys/module/nvidia_peermem/version)", "580.95.05"]),
    ),
    "file-on-disk-of-another-driver": ((True, DRIVER, dict(LOADED, version="570.124.06"), None, None, None), ("fail", ["570.124.06 (modinfo)"])),
    "loaded-but-its-file-is-gone": ((True, DRIVER, {"loaded": True, "installed": False, "version": None}, None, None, None), ("fail", ["no module file"])),
    "driver-not-loaded": ((True, {"loaded": False, "version": None}, NOT_LOADED, None, None, None), ("fail", ["driver is not loaded"])),
    "lsmod-absent": ((True, DRIVER, {"loaded": None, "installed": True, "version": "580.95.05"}, None, None, None), ("fail", ["lsmod is not installed"])),
    "not-installed-for-this-kernel": (
        (True, DRIVER, {"loaded": False, "installed": False, "version": None}, None, None, None), ("fail", ["not installed for kernel", "after OFED"]),
    ),
    # The captures' failure: Unknown symbol ib_register_peer_memory_client, the kernel's RDMA stack has no peer API (inbox).
    "unknown-symbol-on-the-inbox-stack": (
        (True, DRIVER, NOT_LOADED, None, UNKNOWN_SYMBOL, ""),
        ("fail", ["Unknown symbol ib_register_peer_memory_client", "no OFED peer-memory API", f"install OFED's kernel modules for {KERNEL}",
                  "rebuild the driver's nvidia-peermem after OFED"]),
    ),
    # The symbol is exported for this kernel but peermem does not link: built against another OFED, or before it.
    "unknown-symbol-with-ofed-present": (
        (True, DRIVER, NOT_LOADED, None, UNKNOWN_SYMBOL, "ib_uverbs"),
        ("fail", ["Unknown symbol ib_register_peer_memory_client", "the driver was built before OFED", "rebuild the driver's nvidia-peermem after OFED"]),
    ),
    "not-loaded-inbox-stack-no-log": ((True, DRIVER, NOT_LOADED, None, None, ""), ("fail", ["no OFED peer-memory API", "install OFED's kernel modules"])),
    "not-loaded-no-evidence": (
        (True, DRIVER, NOT_LOADED, None, [], "ib_uverbs"), ("fail", ["installed but not loaded: modprobe nvidia-peermem", "built before OFED"]),
    ),
    "another-modules-unknown-symbol-is-not-peermems": (
        (True, DRIVER, NOT_LOADED, None, [dict(UNKNOWN_SYMBOL[0], module="nv_peer_mem")], None), ("fail", ["installed but not loaded"]),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_peermem_verdict(case):
    (required, driver, module, sys_version, symbol_errors, peer_api), (status, words) = CASES[case]
    verdict = peermem_verdict(required, driver, module, KERNEL, sys_version, symbol_errors, peer_api)
    assert verdict[0] == status, verdict
    for word in words:
        assert word in verdict[3], (word, verdict[3])


# What the loader's lines of each peermem capture name: {file: [(module, symbol, err)]}; every other capture has none.
SYMBOL_ERRORS = {
    "dmesg_nvidia_peermem_Unknown-symbol_err-2_inbox-ib_core_JP-note.txt": [
        ("nvidia_peermem", "ib_register_peer_memory_client", -2), ("nvidia_peermem", "ib_unregister_peer_memory_client", -2),
    ],
    "modprobe-v_nv_peer_mem_LEGACY_Unknown-symbol_err-0_RHEL7.8_OFED5.0_nv_peer_memory84.txt": [
        ("nv_peer_mem", "ib_register_peer_memory_client", 0), ("nv_peer_mem", "ib_unregister_peer_memory_client", 0),
    ] * 2,
}


@pytest.mark.parametrize("path", real_params("stack/peermem/*"))
def test_symbol_errors_of_every_real_peermem_capture(path):
    found = kmod.parse_symbol_errors(path.read_text(encoding="utf-8", errors="replace"))
    assert [(e["module"], e["symbol"], e["err"]) for e in found] == SYMBOL_ERRORS.get(path.name, [])


def test_symbol_errors_other_forms():
    text = (
        "[Fri Feb 12 11:47:20 2021] nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client\n"
        "kern  :warn  : 2025-02-10T16:28:06,5+00:00 nvidia-peermem: Unknown symbol ib_query_port (err -22)\n"
        "nvidia_peermem: Unknown symbol ib_cut"  # no newline: maybe cut, not read
    )
    assert kmod.parse_symbol_errors(text) == [
        {"module": "nvidia_peermem", "symbol": "ib_register_peer_memory_client", "problem": "version", "err": None},
        {"module": "nvidia_peermem", "symbol": "ib_query_port", "problem": "unknown", "err": -22},
    ]


def test_modules_symbols_capture_tells_the_ofed_kernel_from_the_inbox_one():
    files = real_files("stack/peermem/modules.symbols_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    ofed_kernel, inbox_kernel = files[0].read_text().split("\n\n", 1)
    assert kmod.symbol_provider(ofed_kernel.split("\n", 1)[1], "ib_register_peer_memory_client") == "ib_uverbs"
    assert kmod.symbol_provider(inbox_kernel.split("\n", 1)[1], "ib_register_peer_memory_client") is None
    assert kmod.symbol_provider("alias symbol:ib_register_peer_memory_client_x ib_core\n", "ib_register_peer_memory_client") is None


@pytest.mark.parametrize("path", real_params("stack/peermem/lsmod_grep_nvidia_peermem_*"))
def test_real_lsmod_captures_of_a_loaded_peermem_pass_at_the_drivers_version(path):
    loaded = kmod.parse_lsmod(path.read_text())
    module = module_facts(loaded, "nvidia_peermem", {"version": "580.95.05", "signer": None, "signed": False, "filename": "/x.ko", "vermagic": "x"})
    assert peermem_verdict(True, DRIVER, module, KERNEL)[0] == "pass"


def test_real_legacy_nv_peer_mem_capture_is_not_nvidia_peermem():
    """The empty `lsmod | grep nv_peer` of the legacy module: nvidia_peermem is not loaded."""
    files = real_files("stack/peermem/lsmod_empty_and_modinfo_nv_peer_mem_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    text = files[0].read_text()
    module = module_facts(kmod.parse_lsmod(text), "nvidia_peermem", kmod.parse_modinfo(text[text.index("filename:"):]))
    verdict = peermem_verdict(True, DRIVER, module, KERNEL, None, [], None)
    assert verdict[0] == "fail" and "installed but not loaded" in verdict[3]


class FakeTool:
    def __init__(self, rc, out, err=""):
        self.available = True
        self.result = (rc, out, err)

    def run(self, args, ok_rcs=(0,), timeout=None):
        return self.result


class Ctx:
    def __init__(self, root, stack):
        self.options = {"expected_stack": normalize(stack), "command_timeout": 120, "checks": None}
        self.facts = {"kernel": KERNEL, "driver": DRIVER}
        self.host = Host(str(root))


LSMOD = "Module                  Size  Used by\nnvidia_peermem         16384  0\nnvidia              104964096  96 nvidia_uvm,nvidia_peermem\n"
MODINFO = "filename:       /lib/modules/6.8.0-100-generic/updates/dkms/nvidia-peermem.ko\nversion:        580.95.05\nname:           nvidia_peermem\n"


@pytest.mark.parametrize(
    ("lsmod", "modinfo", "status", "words"),
    [
        ((0, LSMOD), (0, MODINFO), "pass", ["nvidia_peermem 580.95.05 loaded"]),
        # `lsmod | grep` shape (no header): not a whole lsmod, so "not loaded" could not be trusted.
        ((0, "nvidia_peermem         16384  0\n"), (0, MODINFO), "fail", ["lsmod printed no module list", "run lsmod and modinfo nvidia_peermem by hand"]),
        ((0, LSMOD), (0, "version:        [   5.0-0]\n"), "fail", ["modinfo nvidia_peermem printed unexpected output", "skip_checks"]),
    ],
    ids=["whole", "lsmod-without-header", "modinfo-garbled"],
)
def test_check_never_passes_on_lsmod_or_modinfo_it_cannot_read(tmp_path, monkeypatch, lsmod, modinfo, status, words):
    def tools(cls, option):
        return {"lsmod": FakeTool(*lsmod), "modinfo": FakeTool(*modinfo)}.get(cls.binary) or FakeTool(127, "", "command not found")

    monkeypatch.setattr(stack_checks, "_reader", lambda ctx: StackReader(tools, ctx.host, KERNEL))
    result = stack_checks.check_peermem(Ctx(tmp_path, {"peermem": True}))
    assert result["status"] == status, result
    for word in words:
        assert word in result["message"], (word, result["message"])


def test_check_reads_the_kernel_log_and_modules_symbols_where_peermem_is_not_loaded(tmp_path, monkeypatch):
    """The JP note's node: a kernel update left OFED behind; the message says to install OFED for the kernel and rebuild."""
    (tmp_path / "lib/modules" / KERNEL).mkdir(parents=True)
    (tmp_path / "lib/modules" / KERNEL / "modules.symbols").write_text("alias symbol:ib_register_mad_agent ib_core\n")
    no_peermem = LSMOD.replace("nvidia_peermem         16384  0\n", "")
    dmesg = "[  12.5] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)\n"

    def tools(cls, option):
        return {"lsmod": FakeTool(0, no_peermem), "modinfo": FakeTool(0, MODINFO), "dmesg": FakeTool(0, dmesg)}.get(cls.binary) or FakeTool(127, "")

    monkeypatch.setattr(stack_checks, "_reader", lambda ctx: StackReader(tools, ctx.host, KERNEL))
    monkeypatch.setattr(stack_checks, "_tool", lambda ctx, cls, option=None: tools(cls, option))
    result = stack_checks.check_peermem(Ctx(tmp_path, {"peermem": True}))
    assert result["status"] == "fail"
    assert result["observed"] == {"loaded": False, "installed": True, "kernel_log": ["nvidia_peermem: Unknown symbol ib_register_peer_memory_client"],
                                  "peer_memory_api": None}
    assert f"install OFED's kernel modules for {KERNEL}, then rebuild the driver's nvidia-peermem after OFED" in result["message"]
