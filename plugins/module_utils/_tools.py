# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One wrapper per external tool (private: may change without notice).

Every process the collection starts on a node is started here: with an
argument list (never a shell string), ``LC_ALL=C`` so output is not localised,
and an optional time limit (through coreutils ``timeout``) for long calls.
A failing command raises :class:`ToolError`; only modules turn that into
``fail_json``.

Processes are started by :func:`run_process`, not ``AnsibleModule.run_command``: the latter (ansible-core 2.19
included) stops reading a command's output when one of its one-second waits ends with nothing to read and the
command has exited by the time it looks; what the command wrote in between is lost, and the call returns exit
status 0 with empty or cut output (ansible/ansible#51393, closed unfixed; reproduced in
tests/unit/plugins/module_utils/test_tools_process.py). A node under load, or gpu_facts' reads in threads, widens
that window: an audit of 64 simulated nodes saw it on two of them (systemctl and nv-fabricmanager "printed
nothing", exit status 0). run_process reads the pipes to their end once the command has exited.
"""

from __future__ import annotations

import os
import selectors
import subprocess

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

# Paths searched besides $PATH: tools of NVIDIA and Mellanox packages land in sbin
# folders that a non-login SSH session may not have on its PATH.
SEARCH_DIRS = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
_ENV = {"LC_ALL": "C", "LANG": "C"}
# A read that takes longer than this is hung (nvidia-smi on a wedged GPU can block for ever).
DEFAULT_TIMEOUT = 120
MAX_TIMEOUT = 86400
KILL_AFTER_S = 10


def check_timeout(value, what="timeout"):
    """``value`` as an int when it is a whole number of seconds in 1..MAX_TIMEOUT; ToolError otherwise.

    0 is refused: for coreutils ``timeout`` it means no limit at all.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMEOUT:
        raise ToolError(f"{what} must be a whole number of seconds from 1 to {MAX_TIMEOUT}, got {value!r}")
    return value


class ToolError(GpufleetError):
    """A tool could not be run, or ended with an unexpected exit status."""

    def __init__(self, msg, cmd=None, rc=None, stdout="", stderr=""):
        super().__init__(msg, cmd=cmd, rc=rc, stdout=stdout, stderr=stderr)
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


def _child_env(environ_update):
    """The environment of a command: this process's, updated, without the module's own ansible paths in PYTHONPATH
    (as run_command does: a Python tool such as nvfwupd.py must not import the module's payload)."""
    env = dict(os.environ)
    env.update(environ_update or {})
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(":") if p and not p.endswith(("/ansible_modlib.zip", "/debug_dir"))]
        if kept:
            env["PYTHONPATH"] = ":".join(kept)
        else:
            del env["PYTHONPATH"]
    return env


def _drain(fd, chunks):
    """Read what the non-blocking pipe ``fd`` holds now into ``chunks``; True at its end (EOF)."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        chunks.append(chunk)


def run_process(module, args, environ_update=None, data=None):
    """Run the argument list ``args`` to its end: ``(rc, stdout, stderr)``, the output as text (UTF-8; undecodable
    bytes kept as surrogates, as run_command does). ``data``, when given, is the command's standard input followed by
    a newline (run_command's convention); otherwise its standard input is /dev/null.

    The time limit is the caller's (every wrapper prefixes coreutils ``timeout``). Output a command wrote before it
    exited is never lost: after its exit the pipes are read to what they hold, without waiting for an end that a
    daemon it started and that kept them open would hold back. ``module`` is the calling module (tests replace this
    function and see it)."""
    del module  # the seam's signature: a test's fake sees which module ran the command
    proc = subprocess.Popen(  # an argument list, never a shell
        list(args), bufsize=0, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=_child_env(environ_update), close_fds=True)
    out, err = [], []
    chunks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    with selectors.DefaultSelector() as selector:
        for pipe in (proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
            selector.register(pipe.fileno(), selectors.EVENT_READ)
        if data is not None:
            pending = memoryview((data + "\n").encode("utf-8", "surrogateescape"))
            try:
                while pending:
                    pending = pending[proc.stdin.write(pending):]
            except BrokenPipeError:
                pass  # the command did not read all its input; its exit status says what it made of that
            proc.stdin.close()
        while selector.get_map():
            events = selector.select(1)
            for key, _mask in events:
                if _drain(key.fd, chunks[key.fd]):
                    selector.unregister(key.fd)
            if not events and proc.poll() is not None:
                # It exited while this waited: what it wrote before is in the pipes. Read that, and stop there.
                for key in list(selector.get_map().values()):
                    _drain(key.fd, chunks[key.fd])
                break
    rc = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return rc, b"".join(out).decode("utf-8", "surrogateescape"), b"".join(err).decode("utf-8", "surrogateescape")


class CommandCounter:
    """Counts the processes a module starts (reported so users can size fleet-wide runs)."""

    def __init__(self):
        self.commands = []

    def add(self, cmd):
        self.commands.append(cmd)

    def __len__(self):
        return len(self.commands)


class Tool:
    """Base of the wrappers: resolves the binary once, runs it with an argument list.

    Class attributes a wrapper may set:

    - ``env``: extra environment for this tool, as ``(name, value)`` pairs (``DEBIAN_FRONTEND`` for apt-get), on top of ``LC_ALL=C``;
    - ``default_timeout``: seconds a call may take when the caller gives no ``timeout``. Every call is
      bounded: a hung NVML or BMC must not hang a task forever. ``timeout=None`` means the default.
    """

    binary = ""
    label = ""
    env = ()  # (name, value) pairs
    default_timeout = DEFAULT_TIMEOUT

    def __init__(self, module, path=None, required=False, counter=None):
        self.module = module
        self.counter = counter
        if path:
            self.path = path
        else:
            self.path = module.get_bin_path(self.binary, required=required, opt_dirs=SEARCH_DIRS)

    @property
    def available(self):
        return bool(self.path)

    @property
    def name(self):
        return self.label or self.binary

    def _timeout_prefix(self, timeout):
        timeout_bin = self.module.get_bin_path("timeout", opt_dirs=SEARCH_DIRS)
        if not timeout_bin:
            raise ToolError(
                f"coreutils timeout was not found on this node (searched $PATH and {', '.join(SEARCH_DIRS)}): it bounds every command, {self.name} too"
            )
        # SIGTERM at the limit, SIGKILL 10 s later if the tool ignores it.
        return [timeout_bin, f"--kill-after={KILL_AFTER_S}", str(timeout)]

    def run(self, args, ok_rcs=(0,), timeout=None, data=None):
        """Run the tool; return ``(rc, stdout, stderr)``; raise ToolError on other exit codes.

        ``ok_rcs=None`` accepts every exit status (the caller judges the output).
        """
        if not self.path:
            raise ToolError(f"{self.binary} was not found on this node (searched $PATH and {', '.join(SEARCH_DIRS)})")
        timeout = check_timeout(self.default_timeout if timeout is None else timeout, f"timeout of {self.name}")
        cmd = [*self._timeout_prefix(timeout), self.path, *list(args)]
        if self.counter is not None:
            self.counter.add(cmd)
        # Arguments are passed as written: a Slurm reason with "$HOME" or "~" is not expanded (there is no shell).
        try:
            rc, out, err = run_process(self.module, cmd, environ_update=dict(_ENV, **dict(self.env)), data=data)
        except OSError as exc:
            raise ToolError(f"{self.name} could not be started ({self.path}): {exc}", cmd=cmd) from exc
        if rc in (124, 137):
            raise ToolError(f"{self.name} did not finish within {timeout} s (timed out and was stopped)", cmd=cmd, rc=rc, stdout=out, stderr=err)
        if ok_rcs is not None and rc not in ok_rcs:
            raise ToolError(
                f"{self.name} failed with exit status {rc}: {(err or out).strip()[:500]}",
                cmd=cmd,
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return rc, out, err


class NvidiaSmi(Tool):
    binary = "nvidia-smi"
    label = "nvidia-smi"
    # Exit codes documented in nvidia-smi(1).
    RC_NO_DRIVER = 9  # NVIDIA driver is not loaded / cannot communicate with it
    RC_NO_DEVICE = 6  # a query found no valid GPU
    RC_GPU_LOST = 15  # a GPU has fallen off the bus or has otherwise become inaccessible

    def query_xml(self):
        return self.run(["-q", "-x"])[1]

    def query_gpu_csv(self, fields):
        return self.run(["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])[1]


class FabricManager(Tool):
    binary = "nv-fabricmanager"
    label = "nv-fabricmanager --version"

    def version_text(self):
        return self.run(["--version"])[1]


class Systemctl(Tool):
    binary = "systemctl"
    label = "systemctl"

    def is_active(self, units):
        """``{unit: state}`` for several units in one process (``is-active`` prints one state a line)."""
        # is-active exits 3 when any unit is inactive: that is an answer, not a failure.
        rc, out, err = self.run(["is-active", *list(units)], ok_rcs=None)
        states = out.splitlines()
        if len(states) != len(units):
            raise ToolError(
                f"systemctl is-active printed {len(states)} lines for {len(units)} units",
                cmd=[self.path, "is-active", *list(units)],
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return dict(zip(units, (state.strip() for state in states)))


class Imex(Tool):
    binary = "nvidia-imex"
    label = "nvidia-imex --version"


class ImexCtl(Tool):
    binary = "nvidia-imex-ctl"
    label = "nvidia-imex-ctl -N"


class Dmesg(Tool):
    binary = "dmesg"
    label = "dmesg"

    def kernel_log(self):
        return self.run([])[1]


class MlxFwManager(Tool):
    binary = "mlxfwmanager"
    label = "mlxfwmanager --query"

    def query(self, device=None, query_format="XML"):
        """``(rc, stdout, stderr)`` of ``[-d DEV] --query --query-format XML|Text``, whatever the exit status.

        mlxfwmanager can exit non-zero while printing a valid report (for example "no matching
        image found"): the caller judges the report.
        """
        selected = ["-d", device] if device else []
        return self.run([*selected, "--query", "--query-format", query_format], ok_rcs=None)

    def query_xml(self, device=None):
        return self.query(device)[1]


class Mstflint(Tool):
    """flint's open-source twin (mstflint package); the same commands and output as MFT's flint."""

    binary = "mstflint"
    label = "mstflint query"
    # Burning a ConnectX image takes one to a few minutes; a hung burn must still end.
    BURN_TIMEOUT = 1200

    def query(self, device):
        return self.run(["-d", device, "q"])[1]

    def query_image(self, image):
        """``-i IMG q``: the PSID and firmware version inside an image file."""
        return self.run(["-i", image, "q"])[1]

    def verify_image(self, image):
        """``-i IMG v``: the image's own integrity check (exit status 0 when it is bootable)."""
        return self.run(["-i", image, "v"])[1]

    def burn(self, device, image, timeout=None):
        """``-d DEV -i IMG -y burn``: writes the image (flint refuses an image of another PSID itself)."""
        return self.run(["-d", device, "-i", image, "-y", "burn"], timeout=timeout or self.BURN_TIMEOUT)[1]


class Modinfo(Tool):
    binary = "modinfo"
    label = "modinfo nvidia"

    def module_info(self, name):
        return self.run([name], ok_rcs=None)


class Dcgmi(Tool):
    binary = "dcgmi"
    label = "dcgmi"


class AllReducePerf(Tool):
    binary = "all_reduce_perf"
    label = "nccl-tests all_reduce_perf"


class GpuBurn(Tool):
    binary = "gpu_burn"
    label = "gpu-burn"


class Modprobe(Tool):
    binary = "modprobe"
    label = "modprobe"


class Lsmod(Tool):
    binary = "lsmod"
    label = "lsmod"


class Rmmod(Tool):
    binary = "rmmod"
    label = "rmmod"


class NvidiaUninstall(Tool):
    binary = "nvidia-uninstall"
    label = "nvidia-uninstall"


class NvidiaInstaller(Tool):
    """A driver runfile (NVIDIA-Linux-<arch>-<version>.run); its path is always given."""

    binary = "sh"
    label = "NVIDIA installer"


class AptGet(Tool):
    binary = "apt-get"
    label = "apt-get"
    # No debconf prompt (Secure Boot MOK enrolment) may stall a run.
    env = (("DEBIAN_FRONTEND", "noninteractive"),)


class AptMark(Tool):
    binary = "apt-mark"
    label = "apt-mark"


class DpkgQuery(Tool):
    binary = "dpkg-query"
    label = "dpkg-query"


class Dnf(Tool):
    binary = "dnf"
    label = "dnf"


class Rpm(Tool):
    binary = "rpm"
    label = "rpm"


class Scontrol(Tool):
    binary = "scontrol"
    label = "scontrol"


class Sinfo(Tool):
    binary = "sinfo"
    label = "sinfo"


class Nvfwupd(Tool):
    """NVIDIA's nvfwupd: an installed command, or ``nvfwupd.py`` run by the Python of its virtualenv.

    It talks to a BMC over HTTPS, and when HTTPS fails it retries over plain ``http://`` with the same
    Basic credentials (open-nvfwupd ``BMCLoginAccess.is_reachable``). Its requests honour the proxy
    variables, so every call runs with ``http_proxy`` pointing at a host that cannot resolve (RFC 6761
    ``.invalid``) and ``no_proxy`` cleared: a plain-HTTP request fails before a byte leaves the machine.
    The HTTPS proxy variables are cleared too: the tool talks to the BMC directly.
    """

    binary = "nvfwupd"
    label = "nvfwupd"
    default_timeout = 300  # a FirmwareInventory walk of a large baseboard over a slow management network
    PLAIN_HTTP_REFUSED = "http://plain-http-refused.invalid:9"
    env = (
        ("http_proxy", PLAIN_HTTP_REFUSED),
        ("HTTP_PROXY", PLAIN_HTTP_REFUSED),
        ("https_proxy", ""),
        ("HTTPS_PROXY", ""),
        ("all_proxy", ""),
        ("ALL_PROXY", ""),
        ("no_proxy", ""),
        ("NO_PROXY", ""),
        ("NO_COLOR", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
    )

    def __init__(self, module, path=None, interpreter=None, counter=None):
        # With an interpreter, the command is ``interpreter nvfwupd.py ARGS``.
        self.script = path if interpreter else None
        super().__init__(module, path=interpreter or path, counter=counter)

    def run(self, args, ok_rcs=(0,), timeout=None, data=None):
        return super().run([*([self.script] if self.script else []), *list(args)], ok_rcs=ok_rcs, timeout=timeout, data=data)


class Mlxfwreset(Tool):
    binary = "mlxfwreset"
    label = "mlxfwreset"
    # A level 3 reset restarts the driver and resets the PCI device: seconds, bounded generously.
    RESET_TIMEOUT = 600

    def query(self, device):
        """``--device DEV query``: the reset levels the device supports."""
        return self.run(["--device", device, "query"])[1]

    def reset(self, device, level, timeout=None):
        """``--device DEV --level N -y reset`` (rc and output both returned: the caller judges the steps)."""
        return self.run(["--device", device, "--level", str(level), "-y", "reset"], ok_rcs=None, timeout=timeout or self.RESET_TIMEOUT)


class Flint(Mstflint):
    binary = "flint"
    label = "flint"


# -- the node's software stack (gpu_facts' stack subset): each read only, each bounded by its caller's timeout --


class OfedInfo(Tool):
    binary = "ofed_info"
    label = "ofed_info -s"


class Ibstat(Tool):
    binary = "ibstat"
    label = "ibstat"


class IbvDevinfo(Tool):
    binary = "ibv_devinfo"
    label = "ibv_devinfo"


class Mokutil(Tool):
    binary = "mokutil"
    label = "mokutil"


class Dkms(Tool):
    binary = "dkms"
    label = "dkms status"


class NvHostengine(Tool):
    binary = "nv-hostengine"
    label = "nv-hostengine --version"
