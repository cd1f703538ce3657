# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the nvidia_driver module would change: pure functions, current state and options in, a plan out (private)."""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact, _tools, _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import imex as imex_rules
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

DRIVER_ACTIONS = ("none", "install", "upgrade", "downgrade", "reinstall", "activate", "hold", "remove")
FM_ACTIONS = ("none", "install", "upgrade", "downgrade", "remove")
# A Debian revision or RPM release: what goes after "<version>-" in a package spec (never an apt-get flag).
_PACKAGE_RELEASE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+~_]{0,63}")
# A rollout id is written into the node state file and shown in reports: one line, printable.
_ROLLOUT_ID = re.compile(r"[^\x00-\x1f\x7f\s](?:[^\x00-\x1f\x7f]{0,126}[^\x00-\x1f\x7f\s])?")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
_HEADER_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")
_URL_OPTIONS = "url_username / url_password (HTTP basic authentication), url_headers (a token header) or presigned_url (a URL that carries its signature)"


class PlanError(GpufleetError):
    """The options ask for something the module refuses to do; the message says what to change."""


def version_key(version, what="driver version"):
    """``"550.90.07"`` -> ``(550, 90, 7)``; PlanError naming ``what`` for anything that is not a whole version (see ``_version``)."""
    try:
        return _version.version_key(version, what)
    except _version.VersionError as exc:
        raise PlanError(str(exc)) from exc


def branch(version):
    """``"550.90.07"`` -> ``"550"``: the major that distribution packages are named after (see ``_version``)."""
    return _version.major(str(version))


def parse_checksum(checksum):
    """``sha256:<hex>`` or bare hex -> lower-case hex; PlanError otherwise."""
    try:
        return _artifact.parse_checksum(checksum)
    except _artifact.ArtifactError as exc:
        raise PlanError(exc.msg) from exc


def secret_options(raw):
    """The options of ``raw`` (the module's arguments before AnsibleModule reads them) that must be no_log.

    A ``source`` URL with ``user:password@`` or a signature in its query is refused by :func:`check_options`;
    treating it as no_log as well keeps it out of the invocation that AnsibleModule logs before that check.
    """
    source = (raw or {}).get("source")
    return ["source"] if isinstance(source, str) and _artifact.is_url(source) and _artifact.secret_in_url(source) else []


def _absolute(options, name):
    value = options.get(name)
    if value is not None and (not os.path.isabs(value) or any(c in value for c in "\n\r\x00")):
        raise PlanError(f"{name} must be an absolute path on the node, got {value!r}")


def _check_source(options):
    source, presigned = options.get("source"), options.get("presigned_url")
    if source and presigned:
        raise PlanError("give source or presigned_url, not both")
    if presigned and not _artifact.is_https(presigned):
        raise PlanError("presigned_url must be an https:// URL (its value is not shown: it is no_log)")
    if not source:
        return
    if _artifact.is_url(source):
        reason = _artifact.secret_in_url(source)
        if reason:
            raise PlanError(
                f"source carries {reason}: such a value would be logged with the task's arguments. Nothing was changed. "
                f"Give the URL without it and use {_URL_OPTIONS}: those options are no_log"
            )
        if not _artifact.is_https(source):
            raise PlanError(
                f"source {_artifact.redact_url(source)} is not an https:// URL: the runfile is downloaded only over https "
                "(http:// and ftp:// can be read and redirected by anyone on the way). Serve it over https, or copy it to the node "
                "and give its path"
            )
    elif not os.path.isabs(source) or any(c in source for c in "\n\r\x00"):
        raise PlanError(f"source must be an absolute path on the node or an https:// URL, got {source!r}")


def _check_url_options(options):
    if options.get("url_password") is not None and not options.get("url_username"):
        raise PlanError("url_password needs url_username (HTTP basic authentication sends both)")
    # Sent over https only, and only to the URL's own origin (never across a redirect): _check_source and _artifact.fetch.
    for name, value in (options.get("url_headers") or {}).items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise PlanError(f"url_headers: {name!r} is not an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)")
        if not isinstance(value, str) or not _HEADER_VALUE.fullmatch(value):
            # The value is not shown: it is a secret (url_headers is no_log).
            raise PlanError(f"url_headers: the value of {name} must be text on one line (no line break or control character)")


def check_options(params):
    """The module's options, checked whole before the first command; PlanError naming the option otherwise.

    Returns a copy with ``checksum_hex`` (the runfile's sha256, lower-case) when a runfile is installed.
    """
    options = dict(params)
    if options.get("version") is not None or options.get("state") == "present":
        version_key(options.get("version"), "version")
    try:
        _tools.check_timeout(options.get("timeout"), "timeout")
    except _tools.ToolError as exc:
        raise PlanError(exc.msg + " (seconds allowed for the installer or package manager, and for gpu_processes: wait)") from exc
    if not _PACKAGE_RELEASE.fullmatch(str(options.get("package_release") or "")):
        raise PlanError(
            f"package_release {options.get('package_release')!r} is not a package release: give what follows the version in the "
            "repository's package version (1 in NVIDIA's repositories, 0ubuntu1 in some Ubuntu builds)"
        )
    for name in ("state_file", "kernel_source_path"):
        _absolute(options, name)
    rollout = options.get("rollout_id")
    if rollout is not None and not _ROLLOUT_ID.fullmatch(rollout):
        raise PlanError(f"rollout_id {rollout!r} is not a rollout id: one line of 1 to 128 printable characters")
    _check_source(options)
    _check_url_options(options)
    if options.get("method") == "runfile" and options.get("state") == "present":
        if not (options.get("source") or options.get("presigned_url")) or not options.get("checksum"):
            raise PlanError(
                "method: runfile needs source (the path or URL of NVIDIA-Linux-x86_64-<version>.run; or presigned_url) and checksum"
            )
        options["checksum_hex"] = parse_checksum(options["checksum"])
    elif options.get("checksum") is not None:
        parse_checksum(options["checksum"])
    return options


def _direction(before, after, what):
    """``what`` names ``before`` (read on the node) in the message when it is not a whole version."""
    if before is None:
        return "install"
    if before == after:
        return "none"
    return "upgrade" if version_key(after, "version") > version_key(before, what) else "downgrade"


def fabricmanager_wanted(option, nvswitch_present):
    """True when the fabric manager must follow the driver, False when it must go, None when it is left alone."""
    if option == "present" or (option == "auto" and nvswitch_present):
        return True
    if option == "absent":
        return False
    return None


def plan(current, options):
    """The plan for ``options`` (the module's parameters) against ``current`` (see ``_driver.read_current``).

    Returns ``{"driver": {"action", "before", "after", "kernel_module_before", "kernel_module_after"},
    "fabricmanager": {"action", "before", "after", "managed"}, "imex": {"action", "before", "after", "package", "managed"},
    "changed"}``. Raises PlanError for a downgrade without ``allow_downgrade``.
    """
    driver = current["driver"]
    installed = driver.get("installed_version")
    loaded = driver.get("loaded_version")
    flavor = driver.get("flavor")
    fm_version = (current.get("fabricmanager") or {}).get("version")
    wanted_fm = fabricmanager_wanted(options["fabricmanager"], current.get("nvswitch", False))

    result = {
        "driver": {"action": "none", "before": installed, "after": installed, "kernel_module_before": flavor, "kernel_module_after": flavor},
        "fabricmanager": {"action": "none", "before": fm_version, "after": fm_version, "managed": wanted_fm is not None},
    }
    if options["state"] == "absent":
        if installed or loaded:
            result["driver"].update(action="remove", after=None, kernel_module_after=None)
        if fm_version and wanted_fm is not None:
            result["fabricmanager"].update(action="remove", after=None)
    else:
        target = options["version"]
        version_key(target, "version")
        action = _direction(installed, target, "the installed driver version")
        if action == "downgrade" and not options.get("allow_downgrade"):
            raise PlanError(
                f"driver {installed} is installed and {target} is older: refusing to downgrade. "
                "Set allow_downgrade: true to downgrade (or use the rollback entry point of the nvidia_driver role)",
                before=installed,
                after=target,
            )
        wanted_flavor = options["kernel_module"]
        if action == "none" and flavor and flavor != wanted_flavor:
            action = "reinstall"
        if action == "none" and loaded != target:
            action = "activate"  # installed but not (or another version) loaded: reload or reboot
        if action == "none" and driver.get("held") is False:
            action = "hold"  # package method: someone released the hold; unattended upgrades could move it
        result["driver"].update(action=action, after=target, kernel_module_after=wanted_flavor)
        if wanted_fm is True:
            fm_action = _direction(fm_version, target, "the installed fabric manager version")
            if fm_action == "downgrade" and action != "downgrade" and not options.get("allow_downgrade"):
                raise PlanError(
                    f"fabric manager {fm_version} is newer than driver {target}: set allow_downgrade: true to bring it back to "
                    f"{target}, or fabricmanager: skip to leave it (NVLink will not work while they differ)",
                    before=fm_version,
                    after=target,
                )
            result["fabricmanager"].update(action=fm_action, after=target)
        elif wanted_fm is False and fm_version:
            result["fabricmanager"].update(action="remove", after=None)
    result["imex"] = _plan_imex(current, options, result["driver"])
    result["changed"] = any(result[part]["action"] != "none" for part in ("driver", "fabricmanager", "imex"))
    return result


def _plan_imex(current, options, driver_plan):
    """IMEX at exactly the driver's version (``_driver.imex.plan_imex``); ``current["imex"]`` is what the node has."""
    installed = current.get("imex") or {}
    try:
        wanted = imex_rules.imex_wanted(options.get("imex") or "skip", installed.get("version") or installed.get("present"))
        target = driver_plan["after"] if options["state"] == "present" else None
        allow = bool(options.get("allow_downgrade")) or driver_plan["action"] == "downgrade"
        return imex_rules.plan_imex(installed, target, wanted, allow_downgrade=allow)
    except imex_rules.ImexError as exc:
        raise PlanError(exc.msg) from exc


def predict_reboot(current, plan_result):
    """Check mode's ``reboot_required``: whether the plan would need a reboot, as far as reading the node can tell.

    True for ``activate`` (the installed driver is not the loaded one: the modules must be swapped and a
    reboot does it when a reload cannot), and for any driver change while nvidia-smi says a GPU fell off the
    bus (``gpu_lost``: only a reset or a reboot brings it back). Whether ``rmmod`` will succeed, or the new
    modules will load, is known only by trying: a real run can still return ``reboot_required`` where this is False.
    """
    action = plan_result["driver"]["action"]
    if action == "activate":
        return True
    driver_change = action not in ("none", "hold", "remove")
    return driver_change and (current.get("driver") or {}).get("nvidia_smi") == "gpu_lost"


def diff(plan_result):
    """``{before, after}`` of the small version dict for ``--diff``."""
    drv, fm = plan_result["driver"], plan_result["fabricmanager"]
    before = {"driver": drv["before"], "kernel_module": drv["kernel_module_before"]}
    after = {"driver": drv["after"], "kernel_module": drv["kernel_module_after"]}
    if fm["managed"]:
        before["fabricmanager"] = fm["before"]
        after["fabricmanager"] = fm["after"]
    imex = plan_result.get("imex") or {}
    if imex.get("managed"):
        before["imex"] = imex["before"]
        after["imex"] = imex["after"]
    return {"before": before, "after": after}


__all__ = ["PlanError", "branch", "check_options", "diff", "fabricmanager_wanted", "parse_checksum", "plan", "predict_reboot", "secret_options", "version_key"]
