#!/usr/bin/env bash
# make molecule: every scenario under extensions/molecule, one after the other (each has its own fleet addresses and
# Slurm port, so one's destroy never races the next one's create), `molecule test -s NAME` each, then a summary.
#   tests/molecule/run.sh                 every scenario
#   tests/molecule/run.sh nvidia_driver   the ones named
# Needs root and the simulator's packages (tests/gpusim/install-deps.sh). gpu_firmware also needs NVIDIA's
# open-nvfwupd and its venv (PYTHONPATH=tests .venv/bin/python -m gpusim.opennvfwupd install): without them it is
# skipped with the reason. Exits non-zero when any scenario failed. The fleets live in GPUFLEET_MOLECULE_WORKDIR
# (default /tmp/gpufleet-molecule).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
export PATH=$REPO/.venv/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=${ANSIBLE_COLLECTIONS_PATH:-$REPO/.collections:$REPO/.venv/lib/python3.11/site-packages}
export ANSIBLE_HOST_KEY_CHECKING=False

if [ "$(id -u)" != 0 ]; then
  echo "molecule: the scenarios need root (each simulated node is a real sshd in its own Linux namespaces)" >&2
  exit 1
fi
for daemon in sshd slurmctld slurmd munged; do
  if [ ! -x "/usr/sbin/$daemon" ]; then
    echo "molecule: /usr/sbin/$daemon is missing: run tests/gpusim/install-deps.sh" >&2
    exit 1
  fi
done
[ -e .collections/ansible_collections/gpufleet/lifecycle ] || {
  mkdir -p .collections/ansible_collections/gpufleet && ln -sfn "$REPO" .collections/ansible_collections/gpufleet/lifecycle
}

if [ $# -gt 0 ]; then
  scenarios=("$@")
else
  mapfile -t scenarios < <(find extensions/molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort)
fi

nvfwupd_missing=$(PYTHONPATH=tests "$REPO/.venv/bin/python" - <<'PYEOF'
from gpusim import opennvfwupd
reason = opennvfwupd.unavailable()
if not reason and not opennvfwupd.python().exists():
    reason = f"no venv at {opennvfwupd.VENV}: PYTHONPATH=tests .venv/bin/python -m gpusim.opennvfwupd install"
print(reason or "")
PYEOF
)

declare -a summary
failed=0
for name in "${scenarios[@]}"; do
  if [ ! -f "extensions/molecule/$name/molecule.yml" ]; then
    summary+=("$name: no such scenario (extensions/molecule/$name/molecule.yml)"); failed=1; continue
  fi
  if [ "$name" = gpu_firmware ] && [ -n "$nvfwupd_missing" ]; then
    summary+=("$name: skipped: $nvfwupd_missing"); continue
  fi
  echo "== molecule test -s $name"
  start=$SECONDS
  if molecule test -s "$name" --report; then
    summary+=("$name: passed in $((SECONDS - start)) s")
  else
    summary+=("$name: FAILED after $((SECONDS - start)) s"); failed=1
  fi
done
echo
echo "== molecule scenarios"
printf '%s\n' "${summary[@]}"
exit $failed
