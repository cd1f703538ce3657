"""gpusim: a fleet of simulated GPU nodes on one machine (see tests/gpusim/README.md).

Run it as `PYTHONPATH=tests .venv/bin/python -m gpusim up --spec tests/gpusim/specs/e2e-8.yml`.
"""
