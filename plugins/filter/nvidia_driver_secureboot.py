# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver role's Secure Boot filters: driver_secure_boot_mode, driver_secure_boot_key_sha1 (gpufleet.lifecycle).

Documentation in the adjacent YAML file of each; the logic is in plugins/module_utils/_driver/secureboot.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_secureboot = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.secureboot")


def driver_secure_boot_mode(bom):
    """The BOM's stack.secure_boot mode (any / enforced / off) for nvidia_driver_secure_boot; any when it names none."""
    try:
        return _secureboot.bom_mode(bom if hasattr(bom, "get") else {})
    except _secureboot.SecureBootError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.driver_secure_boot_mode: {exc}") from exc


def driver_secure_boot_key_sha1(bom):
    """The BOM's stack.secure_boot.key_sha1 (40 lower-case hex digits) for nvidia_driver_module_signing_certificate_sha1; "" when none."""
    try:
        return _secureboot.bom_key_sha1(bom if hasattr(bom, "get") else {})
    except _secureboot.SecureBootError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.driver_secure_boot_key_sha1: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle nvidia_driver filters for UEFI Secure Boot."""

    def filters(self):
        return {"driver_secure_boot_mode": driver_secure_boot_mode, "driver_secure_boot_key_sha1": driver_secure_boot_key_sha1}
