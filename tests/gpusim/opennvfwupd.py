"""NVIDIA's real nvfwupd (open-nvfwupd), run from ../shared/tools/open-nvfwupd, never copied here.

Its dependencies go into a virtualenv of its own outside the repository (default
~/.cache/gpusim/nvfwupd-venv; GPUSIM_NVFWUPD_VENV overrides it), installed from PyPI with the
tool's requirements.txt by `ensure()` (tests call it; `.ci/run` runs
`python -m gpusim.opennvfwupd install`). The tool's source folder can be moved with
GPUSIM_OPEN_NVFWUPD. `unavailable()` says why the tool cannot run here (tests skip with it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(os.environ.get("GPUSIM_OPEN_NVFWUPD") or REPO.parent / "shared" / "tools" / "open-nvfwupd")
VENV = Path(os.environ.get("GPUSIM_NVFWUPD_VENV") or Path.home() / ".cache" / "gpusim" / "nvfwupd-venv")
INSTALL_TIMEOUT_S = 600
MARKER = "gpusim-requirements.sha256"


class Unavailable(RuntimeError):
    """The real nvfwupd cannot run here; the message says why and what to do."""


def unavailable() -> str | None:
    """None when the tool's source is there, else the reason (for a pytest skip)."""
    if not (SOURCE / "nvfwupd.py").is_file() or not (SOURCE / "requirements.txt").is_file():
        return f"NVIDIA's open-nvfwupd is absent (no {SOURCE}/nvfwupd.py)"
    return None


def _requirements_digest() -> str:
    return hashlib.sha256((SOURCE / "requirements.txt").read_bytes()).hexdigest()


def python() -> Path:
    return VENV / "bin" / "python"


def ensure(timeout: float = INSTALL_TIMEOUT_S) -> Path:
    """The venv's python, installing the tool's requirements first when needed (under a lock)."""
    reason = unavailable()
    if reason:
        raise Unavailable(reason)
    digest = _requirements_digest()
    if (VENV / MARKER).is_file() and (VENV / MARKER).read_text().strip() == digest and python().exists():
        return python()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f".{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (VENV / MARKER).is_file() and (VENV / MARKER).read_text().strip() == digest:
            return python()
        # Built at its final path, so that its scripts name the right interpreter.
        shutil.rmtree(VENV, ignore_errors=True)
        try:
            for cmd in ([sys.executable, "-m", "venv", str(VENV)],
                        [str(python()), "-m", "pip", "install", "-q", "-r", str(SOURCE / "requirements.txt")]):
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
                if done.returncode != 0:
                    raise Unavailable(f"installing nvfwupd's requirements failed ({' '.join(cmd[-3:])}, rc "
                                      f"{done.returncode}): {(done.stderr or done.stdout).strip()[-600:]}")
        except subprocess.TimeoutExpired:
            shutil.rmtree(VENV, ignore_errors=True)
            raise Unavailable(f"installing nvfwupd's requirements took more than {timeout:g}s") from None
        except Unavailable:
            shutil.rmtree(VENV, ignore_errors=True)
            raise
        (VENV / MARKER).write_text(digest + "\n")
    return python()


def command(*args: str) -> list[str]:
    """argv running the real nvfwupd.py with args (after ensure())."""
    return [str(ensure()), str(SOURCE / "nvfwupd.py"), *args]


def run(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real nvfwupd.py in cwd (default a fresh temporary folder: it writes its logs there)."""
    argv = command(*args)
    with contextlib.ExitStack() as stack:
        where = cwd or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nvfwupd-")))
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", NO_COLOR="1", TERM="dumb", COLUMNS="200")
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=where,
                              stdin=subprocess.DEVNULL, env=env)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["install"]:
        sys.stderr.write("usage: python -m gpusim.opennvfwupd install\n")
        return 2
    reason = unavailable()
    if reason:
        sys.stdout.write(f"gpusim: {reason}; the tests that need it will skip\n")
        return 0
    try:
        sys.stdout.write(f"gpusim: nvfwupd ready: {ensure()} {SOURCE / 'nvfwupd.py'}\n")
    except Unavailable as exc:
        sys.stderr.write(f"gpusim: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
