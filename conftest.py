"""Make the collection importable as ansible_collections.gpufleet.lifecycle.

The repository root is the collection root; pytest sees it through a link
tree in .collections/ (ignored by git), as ansible-test would.
"""

from __future__ import annotations

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent
_TREE = ROOT / ".collections"
_LINK = _TREE / "ansible_collections" / "gpufleet" / "lifecycle"

if not _LINK.exists():
    _LINK.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(ROOT, _LINK, target_is_directory=True)
    except FileExistsError:  # another xdist worker made it first
        pass
if str(_TREE) not in sys.path:
    sys.path.insert(0, str(_TREE))

collect_ignore = [".collections", ".venv", "build", "tests/output"]
