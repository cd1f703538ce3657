# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signed kernel modules under Secure Boot for the nvidia_driver module: reads, the key on the node, checks (private).

The decisions are secureboot.py's (pure). This runs ``mokutil --sb-state`` / ``--list-enrolled`` and ``modinfo``,
and puts the private key on the node only for the install: in a new 0700 folder of the module's tmpdir, the key
file 0600, removed with the DKMS drop-in (``/etc/dkms/framework.conf.d/``) on every exit path.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import secureboot as rules
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import kmod as kmod_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import secureboot as sb_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import Modinfo, Mokutil

INSTALL_ACTIONS = ("install", "upgrade", "downgrade", "reinstall")
DKMS_DROPIN = "etc/dkms/framework.conf.d/gpufleet-module-signing.conf"


def _refused(exc):
    return DriverError(exc.msg)


class ModuleSigning:
    """``check`` before anything changes, ``applied`` around the install, ``verify`` after the load."""

    def __init__(self, module, options, host, counter=None):
        self.module = module
        self.options = options
        self.host = host
        self.counter = counter
        self.plan = None
        self.state = None  # parse_sb_state's result, None where mokutil is not installed
        self.key = options.get("module_signing_key") or None
        self.certificate = None
        self.der = None
        if bool(self.key) != bool(options.get("module_signing_certificate")):
            raise DriverError("module_signing_key and module_signing_certificate go together: give both (the key from your vault) or neither")
        expected = options.get("module_signing_certificate_sha1")
        if expected is not None and not re.fullmatch(r"[0-9a-fA-F]{40}", expected.replace(":", "")):
            raise DriverError(f"module_signing_certificate_sha1 must be a SHA1 fingerprint (40 hex digits, colons allowed), got {len(expected)} characters")
        if self.key:
            try:
                rules.check_private_key(self.key)
                self.der = rules.certificate_der(options["module_signing_certificate"])
                self.certificate = rules.certificate_info(self.der)
            except rules.SecureBootError as exc:
                raise _refused(exc) from exc

    # -- reading -----------------------------------------------------------------------------------------------------
    def _mokutil(self, args):
        tool = Mokutil(self.module, counter=self.counter)
        if not tool.available:
            return None
        result = tool.run(args, ok_rcs=None)
        return None if result[0] in (126, 127) else result  # a wrapper whose program is gone: not installed (as gather.py)

    def read_state(self):
        result = self._mokutil(["--sb-state"])
        if result is None:
            return None
        rc, out, err = result
        try:
            return sb_parser.parse_sb_state(f"{out}\n{err}\n")
        except ParseError as exc:
            raise DriverError(f"cannot tell whether Secure Boot is enforced: {exc}. Nothing was changed", rc=rc, stdout=out, stderr=err) from exc

    def read_enrolled(self):
        result = self._mokutil(["--list-enrolled"])
        if result is None:
            return None
        rc, out, _err = result
        if rc != 0 and "MokListRT is empty" not in out:
            return None
        try:
            return sb_parser.parse_list_enrolled(out)
        except ParseError:
            return None

    def summary(self, problems=None):
        """What the result shows: public facts only (the certificate's fingerprint and name, never the key)."""
        return {
            "secure_boot": rules._state_words(self.state) if self.plan or self.state else None,
            "enforcing": self.plan["enforcing"] if self.plan else (None if self.state is None else bool(self.state.get("enforcing"))),
            "signed": bool(self.plan and self.plan["sign"]),
            "certificate_sha1": (self.certificate or {}).get("sha1"),
            "signer": (self.certificate or {}).get("issuer_cn"),
            "problems": problems or [],
        }

    # -- before anything changes ---------------------------------------------------------------------------------
    def check(self, the_plan):
        """Refuse (DriverError) before the first change, in check mode too; returns the result's ``module_signing``.

        A driver install reads the Secure Boot state and, with a key on an enforcing node, the enrolled keys. A run
        with nothing to change and a key given checks the installed modules' signatures (read only: the role's verify).
        """
        action = the_plan["driver"]["action"]
        if action in INSTALL_ACTIONS:
            self.state = self.read_state()
            enforcing = bool(self.state and self.state["state"] == "enabled" and self.state["enforcing"])
            enrolled = self.read_enrolled() if enforcing and self.key else None
            try:
                self.plan = rules.signing_plan(
                    self.state, bool(self.key), self.certificate, enrolled, self.options["method"], self.options["dkms"],
                    self.options.get("secure_boot") or "any", self.options.get("module_signing_certificate_sha1"),
                )
            except rules.SecureBootError as exc:
                raise _refused(exc) from exc
            return self.summary()
        if action == "none" and self.key and self.options.get("state") == "present":
            self.state = self.read_state()
            if self.state and self.state["enforcing"]:
                return self.summary(self.verify())
        return self.summary()

    # -- the install -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def applied(self, method):
        """The key pair in a private folder, the runfile's signing options and the DKMS drop-in, for the install only."""
        if not (self.plan and self.plan["sign"]):
            yield
            return
        folder = tempfile.mkdtemp(prefix="gpufleet-signing.", dir=self.module.tmpdir)  # 0700
        key_path = os.path.join(folder, "module-signing.key")
        cert_path = os.path.join(folder, "module-signing.der")
        dropin = self.host.path(DKMS_DROPIN)
        wrote = []
        try:
            try:
                _write(key_path, self.key.encode(), 0o600)
                _write(cert_path, self.der, 0o600)
                if self.plan["dkms_config"]:
                    os.makedirs(os.path.dirname(dropin), mode=0o755, exist_ok=True)
                    _remove(dropin + ".tmp")  # left by a run that was killed
                    _write(dropin + ".tmp", rules.dkms_config_text(key_path, cert_path).encode(), 0o644)
                    os.replace(dropin + ".tmp", dropin)
                    wrote.append(dropin)
            except OSError as exc:
                raise DriverError(f"cannot put the module signing key in place for the install: {exc.strerror or exc}. Nothing was installed") from exc
            if self.plan["installer_args"]:
                method.signing_args = rules.installer_signing_args(key_path, cert_path)
            yield
        finally:
            method.signing_args = []
            for path in (*wrote, dropin + ".tmp"):
                _remove(path)
            _shred(key_path)
            _remove(cert_path)
            with contextlib.suppress(OSError):
                os.rmdir(folder)

    # -- after the load ----------------------------------------------------------------------------------------------
    def load_refused(self, error):
        """A message when the kernel refused the new modules for their signature, else None."""
        text = f"{getattr(error, 'stdout', '')}\n{getattr(error, 'stderr', '')}\n{getattr(error, 'msg', '')}"
        return rules.explain_load_failure(text, bool(self.plan and self.plan["enforcing"]))

    def must_verify(self):
        return bool(self.plan and self.plan["sign"])

    def verify(self):
        """The problems of the NVIDIA modules' signatures (modinfo for the running kernel)."""
        tool = Modinfo(self.module, counter=self.counter)
        if not tool.available:
            return ["modinfo is not installed: the modules' signatures cannot be checked"]
        found = {}
        for name in rules.SIGNED_MODULES:
            rc, out, _err = tool.module_info(name)
            try:
                found[name] = kmod_parser.parse_modinfo(out) if rc == 0 else None
            except ParseError:
                found[name] = None
        return rules.signature_problems(found, self.certificate)


def _write(path, data, mode):
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def _remove(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _shred(path):
    """Overwrite the key's bytes before removing it (a plain unlink leaves them on a disk a later reader may see)."""
    with contextlib.suppress(OSError):
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:
            handle.write(b"\0" * size)
            handle.flush()
            os.fsync(handle.fileno())
    _remove(path)


__all__ = ["DKMS_DROPIN", "ModuleSigning"]
