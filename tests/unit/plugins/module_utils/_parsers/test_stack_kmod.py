"""Tests of the lsmod and modinfo parsers, on every real capture under stack/peermem and stack/ofed."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.kmod import lsmod_has_header, parse_lsmod, parse_modinfo

from tests.conftest import real_files, real_params

# lsmod: the modules each capture lists (every other file of stack/peermem lists none: {}).
LSMOD = {
    "lsmod_grep_nvidia_peermem_LOADED_ib_uverbs-user_nccl-tests362.txt": {"nvidia_peermem": 0, "ib_uverbs": 3, "nvidia": 96},
    "lsmod_grep_nvidia_peermem_gpu-operator-rdma_spiderpool-docs.txt": {"nvidia_peermem": 0},
}
# modinfo: (name, version, signer) of the captures that hold one module's modinfo; every other file is refused.
MODINFO = {
    # An unsigned DKMS build: signat PKCS#7 with an empty signer.
    "lsmod_empty_and_modinfo_nv_peer_mem_LEGACY_1.0-8_Ubuntu18.04_nv_peer_memory46.txt": ("nv_peer_mem", "1.0-8", None),
}


@pytest.mark.parametrize("path", real_params("stack/peermem/*"))
def test_real_lsmod(path):
    result = parse_lsmod(path.read_text(encoding="utf-8", errors="replace"))
    assert {name: module["used_by_count"] for name, module in result.items()} == LSMOD.get(path.name, {})


@pytest.mark.parametrize("path", real_params("stack/peermem/*") + real_params("stack/ofed/*"))
def test_real_modinfo(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    expected = MODINFO.get(path.name)
    if expected is None:
        with pytest.raises(ParseError, match="modinfo"):
            parse_modinfo(text)
        return
    result = parse_modinfo(text)
    assert (result["name"], result["version"], result["signer"], result["signed"]) == (*expected, expected[2] is not None)


def test_real_ib_uverbs_users():
    files = real_files("stack/peermem/lsmod_grep_nvidia_peermem_LOADED*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert parse_lsmod(files[0].read_text())["ib_uverbs"]["used_by"] == ["nvidia_peermem", "rdma_ucm", "mlx5_ib"]


def test_real_markdown_escaped_modinfo_is_refused():
    """The OneNote export holds two modinfo mlx5_core outputs with markdown escapes ("version:[   5.0-0]"): never one of them silently."""
    files = real_files("stack/ofed/mlnxofedinstall_23.10-1.1.9.0_rhel7.9_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    text = files[0].read_text()
    with pytest.raises(ParseError, match=r"version '\[ +5\.0-0\]' is not a module version|two 'filename:' lines"):
        parse_modinfo(text)
    first = text[: text.index("[\\[root@localhost")]
    with pytest.raises(ParseError, match=r"modinfo: version '\[ +5\.0-0\]' is not a module version"):
        parse_modinfo(first)


MLX5 = """filename:       /lib/modules/5.15.0-91-generic/updates/dkms/mlx5_core.ko
version:        24.10-1.1.4
license:        Dual BSD/GPL
srcversion:     5E3E5E6F00A1B2C3D4E5F60
depends:        mlxfw,mlx_compat,psample,tls,pci-hyperv-intf
name:           mlx5_core
vermagic:       5.15.0-91-generic SMP mod_unload modversions
sig_id:         PKCS#7
signer:         DKMS module signing key
sig_key:        61:FE:B0:74
sig_hashalgo:   sha512
parm:           debug_mask:debug mask: 1 = dump cmd data, 2 = dump cmd exec time, 3 = both. Default=0 (uint)
"""


def test_modinfo_signed_ofed_module():
    result = parse_modinfo(MLX5)
    assert (result["version"], result["signer"], result["signed"]) == ("24.10-1.1.4", "DKMS module signing key", True)
    assert result["depends"][:2] == ["mlxfw", "mlx_compat"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modinfo: ERROR: Module nvidia_peermem not found.\n", "no 'filename:' line"),
        (MLX5.replace("24.10-1.1.4", "[24.10-1.1.4]"), "version '\\[24.10-1.1.4\\]'"),
        (MLX5 + MLX5, "two 'filename:' lines"),
        (MLX5.replace("/lib/modules", "lib/modules"), "is not a module path"),
    ],
)
def test_modinfo_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_modinfo(text)


def test_lsmod_whole_output():
    text = "Module                  Size  Used by\nnvidia_peermem         16384  0\nmlx5_core            2113536  1 mlx5_ib\nnvidia_peer"
    assert lsmod_has_header(text)
    # The cut last line is not read: nvidia_peer is no module.
    assert sorted(parse_lsmod(text)) == ["mlx5_core", "nvidia_peermem"]
    with pytest.raises(ParseError, match="listed twice"):
        parse_lsmod("nvidia 1 0\nnvidia 1 0\n")
