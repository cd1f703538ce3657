#!/usr/bin/env bash
# make demo: a 16-node simulated fleet with some drift, audited over real SSH, then torn down.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=$REPO/.venv/bin/python
WORKDIR=$REPO/.gpusim/demo
REPORTS=$REPO/reports/demo
SPEC=${GPUSIM_DEMO_SPEC:-tests/gpusim/specs/demo-16.yml}

if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root: each simulated node is a real sshd in its own Linux namespaces, with real Slurm." >&2
  echo "Run it as root (for example: sudo make demo)." >&2
  exit 1
fi

tests/gpusim/install-deps.sh
gpusim() { PYTHONPATH=$REPO/tests "$PY" -m gpusim "$@" --workdir "$WORKDIR"; }

# A fleet left over from an interrupted demo is taken down first.
[ -e "$WORKDIR" ] && gpusim down >/dev/null 2>&1 || true
trap 'echo "== tearing the fleet down"; gpusim down' EXIT

echo "== bringing up the simulated fleet ($SPEC)"
gpusim up --spec "$SPEC"
gpusim status

# The BMCs' certificate is the fleet's own self-signed one: the audit checks it against that, not skips the check.
echo "== auditing it: ansible-playbook playbooks/audit.yml"
export ANSIBLE_COLLECTIONS_PATH=$REPO/.collections ANSIBLE_HOST_KEY_CHECKING=False
"$REPO/.venv/bin/ansible-playbook" -i "$WORKDIR/inventory/hosts.yml" playbooks/audit.yml -f 16 \
  -e "gpufleet_report_dir=$REPORTS" -e "gpufleet_bmc_ca_path=$WORKDIR/bmc/cert.pem"

echo
echo "== the report (also $REPORTS/fleet-report.html and .json)"
cat "$REPORTS/fleet-report.md"
