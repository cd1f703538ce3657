"""_firmware.mlx.check_options: every option checked (full match) and normalised before the first command."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.mlx import MlxFwError, check_options

HEX = "A" * 64
BASE = {
    "image": "/srv/fw.bin",
    "checksum": "sha256:" + HEX,
    "image_dir": None,
    "checksums": None,
    "images": None,
    "devices": None,
    "unmatched": "fail",
    "allow_downgrade": False,
    "reset": "none",
    "timeout": 1200,
    "state_file": "/etc/ansible/facts.d/gpufleet.fact",
    "record_last_known_good": True,
    "rollout_id": None,
}


def options(**changes):
    return check_options(dict(BASE, **changes))


def test_checksum_is_normalised_to_lower_case_hex():
    assert options()["images"] == [{"path": "/srv/fw.bin", "checksum": "a" * 64}]


def test_image_dir_uses_only_the_named_files_in_name_order():
    got = options(image=None, checksum=None, image_dir="/srv/nic", checksums={"b.bin": HEX, "a.bin": "sha256:" + HEX})
    assert [image["path"] for image in got["images"]] == ["/srv/nic/a.bin", "/srv/nic/b.bin"]


@pytest.mark.parametrize(
    "device",
    ["0000:17:00.0", "17:00.0", "/dev/mst/mt4129_pciconf0", "0000:AF:00.1"],
)
def test_device_names_accepted(device):
    assert options(devices=[device])["devices"] == [device]


@pytest.mark.parametrize(
    "device",
    ["0000:17:00.0\n", "17:00.8", "/dev/mst/../../etc/passwd x", "mlx5_0", "", "/dev/sda"],
)
def test_device_names_refused(device):
    with pytest.raises(MlxFwError, match=r"devices: .* is neither a PCI address"):
        options(devices=[device])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"image": None, "checksum": None}, "give exactly one of image"),
        ({"image_dir": "/srv/nic"}, "give exactly one of image"),
        ({"checksum": None}, "checksum is required with image"),
        ({"checksum": HEX + "\n"}, None),  # surrounding blanks are allowed by _artifact.parse_checksum
        ({"checksum": HEX[:63]}, "is not a sha256"),
        ({"image": None, "checksum": None, "image_dir": "/srv/nic", "checksums": {"a/b.bin": HEX}}, "is not a plain file name"),
        ({"image": None, "checksum": None, "images": [{"path": "fw.bin", "checksum": HEX}]}, r"images\[0\].path must be an absolute path"),
        ({"image": None, "images": [{"path": "/fw.bin", "checksum": HEX}]}, "images carries each image's checksum"),
        ({"reset": "warm"}, "reset must be one of none, mlxfwreset, reboot"),
        ({"unmatched": "ignore"}, "unmatched must be one of fail, skip"),
        ({"timeout": True}, "timeout must be a whole number"),
        # the rule and message of every module that takes a rollout id (_rollout/ids.py)
        ({"rollout_id": "r1\n"}, r"rollout_id 'r1\\n' may hold only letters, digits, '\.', '_' and '-' \(1 to 64\)"),
        ({"rollout_id": "r 1"}, r"rollout_id 'r 1' may hold only letters"),
        ({"rollout_id": "r:1"}, r"rollout_id 'r:1' may hold only letters"),
        ({"rollout_id": "r" * 65}, "rollout_id 'r{65}' may hold only letters"),
        ({"rollout_id": "r" * 129}, "rollout_id of 129 characters may hold only letters"),
        ({"rollout_id": "r" * 64}, None),
        ({"rollout_id": "r-2026.12_05"}, None),
    ],
)
def test_bad_options_name_the_option(changes, message):
    if message is None:
        got = options(**changes)
        assert got["images"][0]["checksum"] == "a" * 64
        assert got["rollout_id"] == changes.get("rollout_id")
        return
    with pytest.raises(GpufleetError, match=message):  # MlxFwError, or _artifact's ArtifactError for a checksum
        options(**changes)
