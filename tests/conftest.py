"""Fixtures shared by every test."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Real tool outputs captured on GPU nodes live beside the checkout, never in it.
REAL = ROOT.parent / "shared" / "fixtures" / "real"
OWN = ROOT / "tests" / "fixtures"


def real_files(pattern):
    """Sorted real fixture files matching a glob under shared/fixtures/real (empty if absent)."""
    if not REAL.is_dir():
        return []
    return sorted(REAL.glob(pattern))


def real_params(pattern):
    """pytest params, one per real fixture file; a skip with a reason when shared/ is absent."""
    files = real_files(pattern)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no real fixtures for {pattern}: ../shared/fixtures/real is absent"))]
    return [pytest.param(path, id=str(path.relative_to(REAL))) for path in files]


@pytest.fixture
def real_dir():
    if not REAL.is_dir():
        pytest.skip("../shared/fixtures/real is absent")
    return REAL


@pytest.fixture(scope="session")
def real_nvfwupd():
    """NVIDIA's real nvfwupd ready to run (its own venv installed), or a skip that says why."""
    from gpusim import opennvfwupd  # importable: the simulator's tests put tests/ on sys.path

    reason = opennvfwupd.unavailable()
    if reason:
        pytest.skip(reason)
    try:
        opennvfwupd.ensure()
    except opennvfwupd.Unavailable as exc:
        pytest.skip(str(exc))
