"""One simulated node: its folder, its tool wrappers, its sshd, and its namespace.

A node is a set of processes (sshd and its sessions, slurmd and its jobs) sharing one mount and
UTS namespace (and, where the kernel allows it, a time namespace so `uptime` restarts at each
boot). They are started by `boot.sh` under `unshare`; the node is found again by the inode of
its mount namespace, recorded in NODE_DIR/mntns at boot. Stopping a node kills every process
of that namespace, which is what a reboot does to open SSH sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
from collections import defaultdict
from pathlib import Path

from gpusim import progress

NODE_MOUNT = "/var/lib/gpusim"
# Paths ansible.builtin.reboot and people may call to reboot; on Debian they are links to
# systemctl, so the bind mount lands on the link's target (see bind_targets()).
REBOOT_PATHS = ("/sbin/shutdown", "/usr/sbin/shutdown", "/sbin/reboot", "/usr/sbin/reboot", "/sbin/poweroff",
                "/usr/sbin/poweroff", "/sbin/halt", "/usr/sbin/halt", "/bin/systemctl", "/usr/bin/systemctl")
SBIN_TOOLS = {"shutdown", "reboot", "poweroff", "halt", "modprobe", "rmmod", "lsmod", "insmod", "nv-fabricmanager"}
# When systemctl is called by one of these names (a link to it, or a bind mount over the link's
# target) it acts as that command.
SYSTEMCTL_ALIASES = ("shutdown", "reboot", "poweroff", "halt")
POWER_FILE = "power"  # up | rebooting | down
# The node's own disk: each of these folders is an overlay of the controller's (lower, read only) with the
# node's changes (upper) in NODE_DIR/disk/<name>/upper, so what a playbook writes there (facts.d, apt/dpkg holds,
# modprobe.d, downloads) lands on that node only and survives its reboots. Mounted first at boot, so that the
# binds that land under them (/var/lib/gpusim, /etc/slurm, root's shell files) go on top.
OVERLAYS = ("/etc", "/var/lib", "/var/cache", "/var/tmp", "/var/log", "/opt", "/root")
DISK = "disk"
# overlayfs option values cannot hold these (',' and ':' separate options and lower layers).
# Tries (0.1 s apart) to mount a node's disk whose previous mount is still going away.
OVERLAY_TRIES = 600
_OVERLAY_UNSAFE = (",", ":", "\\", "\n")


def tool_names() -> tuple[str, ...]:
    from gpusim.tools import TOOL_NAMES

    return tuple(TOOL_NAMES)


# What a wrapper runs: `python -I -S -c TOOL_MAIN TESTS_DIR NAME ARGS...` (sys.argv[1] is the tests folder).
TOOL_MAIN = "import sys; sys.path.insert(0, sys.argv.pop(1)); from gpusim.tools import main; sys.exit(main())"


def wrapper_text(name: str, python: str, tests_dir: str, aliases: tuple[str, ...] = ()) -> str:
    """A /bin/sh wrapper that runs one simulated tool.

    With aliases (systemctl), the wrapper runs the tool named like the path it was called by when
    that is an alias: /sbin/shutdown is a link to systemctl on Debian.
    """
    lines = ["#!/bin/sh", f"tool={shlex.quote(name)}"]
    if aliases:
        lines.append(f'case "${{0##*/}}" in {"|".join(aliases)}) tool="${{0##*/}}";; esac')
    # -I -S: the tools need the standard library only, and a Python without site (the virtualenv's .pth files), runpy
    # and PYTHON* variables starts 10 ms sooner; a real nvidia-smi is a C program. The tests folder comes as an argument.
    lines += [
        f"exec {shlex.quote(python)} -I -S -c {shlex.quote(TOOL_MAIN)} {shlex.quote(tests_dir)} \"$tool\" \"$@\"",
        "",
    ]
    return "\n".join(lines)


def _has_imex(node_dir: Path) -> bool:
    """Whether the node's state (saved before its wrappers are written) has IMEX: a GB200 / GB300 tray."""
    try:
        return "imex" in json.loads((node_dir / "state.json").read_text())
    except (OSError, ValueError):
        return False


def write_nvlink_files(node_dir: Path, node_spec: dict) -> None:
    """A tray's /etc/nvidia-imex/nodes_config.cfg (its own /etc): the addresses of its NVLink domain, one a line."""
    members = (node_spec.get("nvlink") or {}).get("members")
    if not members:
        return
    etc, _work = overlay_dirs(node_dir, "/etc")
    (etc / "nvidia-imex").mkdir(parents=True, exist_ok=True)
    (etc / "nvidia-imex" / "nodes_config.cfg").write_text("".join(m["address"] + "\n" for m in members))


def write_wrappers(node_dir: Path, python: str, tests_dir: str) -> None:
    for sub in ("bin", "sbin"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    names = set(tool_names())
    if not _has_imex(node_dir):
        from gpusim.tools import MNNVL_TOOLS

        names -= set(MNNVL_TOOLS)
    aliases = tuple(a for a in SYSTEMCTL_ALIASES if a in names)
    for name in sorted(names | {"systemctl"}):
        path = wrapper_path(node_dir, name)
        path.write_text(wrapper_text(name, python, tests_dir, aliases if name == "systemctl" else ()))
        path.chmod(0o755)


# root's shell start-up files on the controller (pyenv, cargo...) are not the node's: a node has
# Debian's plain ones. A host rc file that takes a lock (pyenv rehash) would also be killed
# mid-way by a simulated reboot and leave the lock behind.
SHELL_FILES = {
    ".bashrc": "# ~/.bashrc of a simulated node\nexport PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
    ".profile": "# ~/.profile of a simulated node\nif [ -n \"$BASH\" ] && [ -f ~/.bashrc ]; then . ~/.bashrc; fi\n",
    ".bash_profile": "# ~/.bash_profile of a simulated node\nif [ -f ~/.profile ]; then . ~/.profile; fi\n",
    ".bash_login": "# ~/.bash_login of a simulated node\nif [ -f ~/.profile ]; then . ~/.profile; fi\n",
}
ROOT_HOME = "/root"


def write_shell_files(node_dir: Path) -> None:
    home = node_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    for name, text in SHELL_FILES.items():
        (home / name).write_text(text)


def overlay_dirs(node_dir: Path, target: str) -> tuple[Path, Path]:
    """(upper, work) of the node's overlay over target ("/etc" -> NODE_DIR/disk/etc/{upper,work})."""
    base = node_dir / DISK / target.strip("/").replace("/", "_")
    return base / "upper", base / "work"


def overlay_problem(path: Path) -> str | None:
    """Why path cannot hold a node's overlay dirs or be reached by the node, or None."""
    text = str(path)
    bad = [c for c in _OVERLAY_UNSAFE if c in text]
    if bad:
        return f"{text} holds {' '.join(repr(c) for c in bad)}, which overlayfs options cannot carry"
    for target in OVERLAYS:
        if text == target or text.startswith(target.rstrip("/") + "/"):
            return (f"{text} lies under {target}, which every node overlays with its own disk: the node would write "
                    f"its logs and state into its overlay instead of {text}")
    return None


def copy_submount_files(node_dir: Path, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Files mounted over paths under the overlaid folders on the controller (a container's /etc/hosts,
    /etc/resolv.conf, /etc/hostname) are not part of the lower layer: give the node a copy of what the
    controller sees, once (a reboot keeps the node's own). Returns the paths copied."""
    copied = []
    with open(mountinfo) as fh:
        points = [line.split()[4] for line in fh]
    for point in points:
        for target in OVERLAYS:
            if not point.startswith(target + "/") or not os.path.isfile(point):
                continue
            upper, _work = overlay_dirs(node_dir, target)
            dest = upper / point[len(target) + 1:]
            if dest.exists():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                dest.write_bytes(Path(point).read_bytes())
                copied.append(point)
    return copied


def prepare_disk(node_dir: Path, name: str) -> None:
    """Make the node's overlay dirs and what a real node has of its own in /etc: its hostname and machine-id."""
    for target in OVERLAYS:
        for folder in overlay_dirs(node_dir, target):
            folder.mkdir(parents=True, exist_ok=True)
    etc, _work = overlay_dirs(node_dir, "/etc")
    if not (etc / "hostname").exists():
        (etc / "hostname").write_text(name + "\n")
    if not (etc / "machine-id").exists():
        (etc / "machine-id").write_text(os.urandom(16).hex() + "\n")
    copy_submount_files(node_dir)


def overlay_mount_lines(node_dir: Path) -> list[str]:
    q = shlex.quote
    lines = []
    for target in OVERLAYS:
        upper, work = overlay_dirs(node_dir, target)
        options = f"lowerdir={target},upperdir={upper},workdir={work}"
        # A reboot mounts the same upper again: the previous namespace's mount can take a moment to go, longer on a
        # loaded machine (5 s was the limit before). Each try is a line in boot.log (set -x): progress, so node.boot
        # keeps waiting; after OVERLAY_TRIES the boot fails saying which disk stayed busy.
        lines.append(f"if [ -d {q(target)} ]; then n=0; until mount -t overlay gpusim-disk -o {q(options)} {q(target)}; do "
                     f"n=$((n+1)); [ $n -lt {OVERLAY_TRIES} ] || {{ echo {q('gpusim: the disk ' + target + ' stayed busy')}; exit 1; }}; "
                     "sleep 0.1; done; fi")
    return lines


def bind_targets() -> dict[str, str]:
    """Host paths to cover with a node's wrapper inside its namespace: {real path: tool name}."""
    targets: dict[str, str] = {}
    for path in REBOOT_PATHS:
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if not os.path.isfile(real) or real.startswith("/usr/local/"):
            continue
        name = os.path.basename(real)
        if name in ("systemctl", *SYSTEMCTL_ALIASES):
            targets[real] = name
    return dict(sorted(targets.items()))


def wrapper_path(node_dir: Path, name: str) -> Path:
    return node_dir / ("sbin" if name in SBIN_TOOLS else "bin") / name


def sshd_config(*, name: str, address: str, port: int, node_dir: Path, authorized_keys: Path, slurm_conf: Path) -> str:
    ssh = node_dir / "ssh"
    return "\n".join([
        f"# sshd of simulated node {name}",
        f"ListenAddress {address}:{port}",
        f"HostKey {ssh / 'ssh_host_ed25519_key'}",
        "PidFile /run/sshd.pid",
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "UseDNS no",
        "StrictModes no",
        "PrintMotd no",
        "PrintLastLog no",
        # Ansible with pipelining and forks opens many sessions per connection and many connections.
        "MaxSessions 200",
        "MaxStartups 500:30:1000",
        "LoginGraceTime 30",
        "ClientAliveInterval 0",
        "AcceptEnv LANG LC_*",
        f"SetEnv SLURM_CONF={slurm_conf} GPUSIM_NODE={name}",
        "Subsystem sftp internal-sftp",
        "LogLevel ERROR",
        "",
    ])


def boot_script(*, name: str, node_dir: Path, slurm_conf: Path, slurmd_args: list[str], binds: dict[str, str]) -> str:
    """The script run under unshare: mounts, hostname, sshd, slurmd."""
    q = shlex.quote
    nd = q(str(node_dir))
    lines = [
        "#!/bin/sh",
        f"# boot of simulated node {name} (run by gpusim under unshare; do not run by hand)",
        "set -eu",
        f"exec >>{nd}/log/boot.log 2>&1",
        'echo "boot $(date +%s)"',
        # Each step is traced into boot.log: the log growing is the boot's progress (node.boot waits by it) and its
        # last line says where a boot that stopped moving was.
        "set -x",
        *overlay_mount_lines(node_dir),
        # The mount point on the node's own disk (its /var/lib overlay): the controller's /var/lib/gpusim may be
        # removed by another fleet's `down` while this node reboots (two test files run at once).
        f"mkdir -p {NODE_MOUNT}",
        f"mount --bind {nd} {NODE_MOUNT}",
        f"mount --bind {nd}/bin /usr/local/bin",
        f"mount --bind {nd}/sbin /usr/local/sbin",
        # /run is a tmpfs, empty at each boot (pid files, sshd's privsep dir), as on a real node.
        "mount -t tmpfs -o mode=755,size=64m gpusim-run /run",
        f"mount --bind {nd}/boot_id /proc/sys/kernel/random/boot_id",
        f"mount --bind {nd}/osrelease /proc/sys/kernel/osrelease",
        f"if [ -d /proc/driver ]; then mount --bind {nd}/proc_driver /proc/driver; fi",
        f"if [ -d /etc/slurm ]; then mount --bind {q(str(slurm_conf.parent))} /etc/slurm; fi",
    ]
    for real, tool in binds.items():
        lines.append(f"mount --bind {q(str(wrapper_path(node_dir, tool)))} {q(real)}")
    for rc_file in SHELL_FILES:
        target = f"{ROOT_HOME}/{rc_file}"
        lines.append(f"if [ -f {target} ]; then mount --bind {nd}/home/{rc_file} {target}; fi")
    lines += [
        f"hostname {q(name)}",
        f"readlink /proc/self/ns/mnt > {nd}/mntns.tmp && mv {nd}/mntns.tmp {nd}/mntns",
        "mkdir -p /run/sshd /run/lock && chmod 755 /run/sshd",
        f"/usr/sbin/sshd -f {nd}/ssh/sshd_config -E {nd}/log/sshd.log",
        f"SLURM_CONF={q(str(slurm_conf))}; export SLURM_CONF",
        f"cd {NODE_MOUNT}",
        # GPUSIM_SLURMD_DELAY (set by the supervisor after a reboot that killed jobs): slurmd comes up that much
        # later, in the background, as on a real node whose reboot lasted longer than Slurm's job grace.
        'if [ -n "${GPUSIM_SLURMD_DELAY:-}" ]; then',
        f'  (sleep "$GPUSIM_SLURMD_DELAY"; exec {" ".join(q(a) for a in slurmd_args)}) </dev/null >/dev/null 2>&1 &',
        "else",
        "  " + " ".join(q(a) for a in slurmd_args),
        "fi",
        "",
    ]
    return "\n".join(lines)


def make_host_key(node_dir: Path, name: str) -> None:
    ssh = node_dir / "ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    key = ssh / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(key)], check=True)


def mntns_inode(node_dir: Path) -> str | None:
    try:
        return (node_dir / "mntns").read_text().strip() or None
    except FileNotFoundError:
        return None


def namespace_table() -> dict[str, list[int]]:
    """{'mnt:[inode]': [pids]} for every process on the machine (one /proc scan)."""
    table: dict[str, list[int]] = defaultdict(list)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            table[os.readlink(f"/proc/{entry.name}/ns/mnt")].append(int(entry.name))
    return table


def processes(node_dir: Path, table: dict[str, list[int]] | None = None) -> list[int]:
    inode = mntns_inode(node_dir)
    if inode is None:
        return []
    if table is None:
        table = namespace_table()
    if inode == os.readlink("/proc/self/ns/mnt"):  # never our own namespace (a stale file)
        return []
    return list(table.get(inode, []))


# Killed processes of a node that are still there after this long without one of them going away are stuck.
KILL_STALL_S = 60.0


def kill(node_dir: Path, stall: float = KILL_STALL_S) -> None:
    """Kill every process of the node (SIGKILL: a reboot, not a shutdown) and wait until none is left.

    Waited for by progress: on a loaded machine a SIGKILLed process can take seconds to go; each one that goes
    restarts the stall clock (a fixed 10 s limit left a node down, its reboot abandoned, under load)."""
    def gone() -> bool:
        pids = processes(node_dir)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    progress.wait(gone, progress=lambda: len(processes(node_dir)), stall=stall, interval=0.05,
                  what=f"the processes of node {node_dir.name} after SIGKILL",
                  missing=lambda: f"still there: {processes(node_dir)}")
    with contextlib.suppress(FileNotFoundError):
        (node_dir / "mntns").unlink()


def set_power(node_dir: Path, value: str) -> None:
    tmp = node_dir / f".{POWER_FILE}.tmp"
    tmp.write_text(value + "\n")
    os.replace(tmp, node_dir / POWER_FILE)


def power(node_dir: Path) -> str:
    try:
        return (node_dir / POWER_FILE).read_text().strip()
    except FileNotFoundError:
        return "down"


_TIMENS: bool | None = None


def time_namespace_works() -> bool:
    """Whether `unshare --time --boottime` works here (kernel >= 5.6 and permitted)."""
    global _TIMENS  # noqa: PLW0603 - computed once per process
    if _TIMENS is None:
        try:
            done = subprocess.run(["unshare", "--time", "--boottime", "-1", "true"], capture_output=True, timeout=10, check=False)
            _TIMENS = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _TIMENS = False
    return _TIMENS


def unshare_command(node_dir: Path, script: str = "boot.sh") -> list[str]:
    cmd = ["unshare", "--mount", "--uts", "--propagation", "private"]
    if time_namespace_works():
        with open("/proc/uptime") as fh:
            uptime = int(float(fh.read().split()[0]))
        # The node's CLOCK_BOOTTIME (uptime, and the BootTime slurmd reports: now - uptime) restarts at 0..1 s at
        # each boot, so that Slurm sees the node boot after its reboot request, as a real node does.
        cmd += ["--time", "--boottime", str(-uptime)]
    return [*cmd, "/bin/sh", str(node_dir / script)]


# A boot whose script shows no progress (no new line in boot.log) for this long is stuck: on a loaded machine a step
# (a mount, sshd's or slurmd's start) can take seconds, never minutes.
BOOT_STALL_S = 120.0


def boot(node_dir: Path, script: str = "boot.sh", stall: float = BOOT_STALL_S, slurmd_delay: float = 0.0) -> None:
    """Start the node's namespace, sshd and slurmd; return once sshd listens (the script has run to its end).

    script is boot.sh for the first boot, reboot.sh after. slurmd_delay > 0: slurmd starts that many seconds
    later (in the background). The boot is waited for by its own progress: each step it runs is traced into
    NODE_DIR/log/boot.log, and only a script that adds nothing there for `stall` seconds is killed, with the step it
    was stuck at in the error (a fixed 30 s limit killed boots that were still moving on a loaded machine).
    """
    with contextlib.suppress(FileNotFoundError):
        (node_dir / "mntns").unlink()
    env = {k: v for k, v in os.environ.items() if k != "GPUSIM_SLURMD_DELAY"}
    if slurmd_delay > 0:
        env["GPUSIM_SLURMD_DELAY"] = f"{slurmd_delay:.1f}"
    boot_log = node_dir / "log" / "boot.log"
    with subprocess.Popen(unshare_command(node_dir, script), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env) as proc:
        try:
            progress.wait(lambda: proc.poll() is not None, progress=lambda: progress.size(boot_log), stall=stall,
                          what=f"node {node_dir.name}'s {script}", missing=lambda: "its log ends:\n" + progress.tail(boot_log))
        except progress.Stalled as stalled:
            proc.kill()
            raise RuntimeError(str(stalled)) from None
        output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.returncode != 0:
        raise RuntimeError(f"gpusim: node {node_dir.name} failed to boot (rc {proc.returncode}): {output.strip()}\n"
                           + progress.tail(boot_log, 30))
    set_power(node_dir, "up")
