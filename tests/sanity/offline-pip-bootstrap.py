"""Give ansible-test the pip bootstrap script it would download.

`ansible-test sanity --venv` bootstraps pip in each virtual environment with a
get-pip script fetched from a CI host that our build machines cannot reach.
This writes an equivalent script into ansible-test's cache: it runs pip from a
wheel downloaded from the package index (which is reachable), so ansible-test
finds the script and never tries the download.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import ansible_test

SCRIPT = '''"""Stand-in for get-pip.py {version}, written by tests/sanity/offline-pip-bootstrap.py."""
import sys
sys.path.insert(0, {wheel!r})
from pip._internal.cli.main import main
# Like get-pip.py: the arguments are packages and pip options, plus get-pip's own
# --no-setuptools / --no-wheel, which only say what not to add.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--upgrade", "--force-reinstall"] + args))
'''


def pip_version() -> str:
    source = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    match = re.search(r"default_packages = dict\(\s*pip='([^']+)'", source.read_text())
    if not match:
        sys.exit(f"cannot find the pip version ansible-test bootstraps in {source}")
    return match.group(1)


def main() -> None:
    version = pip_version()
    cache = pathlib.Path.home() / ".ansible" / "test" / "cache"
    script = cache / f"get_pip_{version.replace('.', '_')}.py"
    wheels = sorted(cache.glob(f"pip-{version}-*.whl"))
    if not wheels:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(cache), f"pip=={version}"],
            check=True,
        )
        wheels = sorted(cache.glob(f"pip-{version}-*.whl"))
    script.write_text(SCRIPT.format(version=version, wheel=str(wheels[0])))
    print(f"ansible-test pip bootstrap: {script} -> {wheels[0].name}")


if __name__ == "__main__":
    main()
