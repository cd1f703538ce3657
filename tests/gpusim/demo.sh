#!/usr/bin/env bash
# make demo: a 24-node simulated fleet (4 racks, HGX H100 and L40S), audited over real SSH, then rolled out with
# playbooks/upgrade.yml (canary, soak, waves spread over racks, one injected fault rolled back), the report printed
# and written (Markdown, HTML with its timeline, JSON, JUnit), then torn down.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=$REPO/.venv/bin/python
WORKDIR=$REPO/.gpusim/demo
REPORTS=$REPO/reports/demo
SPEC=${GPUSIM_DEMO_SPEC:-tests/gpusim/specs/demo-rollout-24.yml}
# GPUSIM_DEMO_ROLLOUT=0: the audit only (for example of tests/gpusim/specs/demo-16.yml, whose BOMs are not for a rollout).
ROLLOUT_TOO=${GPUSIM_DEMO_ROLLOUT:-1}

# What the demo does around the rollout, for demo-rollout-24.yml: the runfiles it builds, what people do on the fleet
# before it, the rollout's variables, what it shows after. Another spec brings its own in <spec>.demo.env beside it
# (tests/gpusim/specs/demo-nvl72.demo.env), sourced after these.
DEMO_RUNFILE_VERSIONS="570.124.06 580.82.07"
DEMO_ROLLOUT_SAYS="canary, soak, waves of at most 6, 2 per rack"
DEMO_ROLLOUT_VARS='{"gpufleet_max_unavailable": "25%", "gpufleet_waves": ["25%"], "gpufleet_wave_spread_by": ["rack"],
       "gpufleet_wave_max_per_domain": 2, "gpufleet_soak_seconds": 3, "gpufleet_wave_pause_seconds": 2,
       "gpufleet_failure_budget": 2, "gpufleet_wave_max_fail_percentage": 50, "gpufleet_reboot_timeout": 120,
       "gpufleet_capacity_poll_seconds": 2, "gpufleet_capacity_wait_seconds": 300, "node_maintenance_poll_interval": 1,
       "gpu_validate_poll_interval": 1, "nvidia_driver_poll_interval": 1}'
# A person drained l40s-09 for a repair: the rollout must keep that drain and its reason. Short jobs run on the
# H100 nodes: their drains wait for them.
demo_before_rollout() {
  scontrol update nodename=l40s-09 state=drain reason="admin: PSU swap, do not resume"
  for n in h100-01 h100-02 h100-03 h100-04 l40s-01; do sbatch -Q -w "$n" -J "demo-$n" -o /dev/null -D /tmp --wrap "sleep 8"; done
}
demo_after_rollout() {
  echo "== Slurm after the rollout: l40s-09 keeps its drain"
  sinfo -N -o "%N %T %E" | sort
}
DEMO_ENV=${SPEC%.yml}.demo.env
# shellcheck source=/dev/null
[ -f "$DEMO_ENV" ] && . "$DEMO_ENV"

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
# SSH pipelining (one round trip per module, as the fleet's own ansible.cfg has it); ANSIBLE_PIPELINING=False to see the default.
export ANSIBLE_COLLECTIONS_PATH=$REPO/.collections ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_PIPELINING=${ANSIBLE_PIPELINING:-True}
"$REPO/.venv/bin/ansible-playbook" -i "$WORKDIR/inventory/hosts.yml" playbooks/audit.yml -f 24 \
  -e "gpufleet_report_dir=$REPORTS" -e "gpufleet_bmc_ca_path=$WORKDIR/bmc/cert.pem"

echo
echo "== the audit's report (also $REPORTS/fleet-report.html and .json)"
cat "$REPORTS/fleet-report.md"
[ "$ROLLOUT_TOO" = 1 ] || exit 0

# The rollout's artifacts: real NVIDIA-Linux-x86_64-<version>.run files with their sha256 (the installed driver's
# is the rollback's last known good).
# shellcheck disable=SC2086  # one argument per version
RUNFILES=$("$PY" - "$WORKDIR/runfiles" $DEMO_RUNFILE_VERSIONS <<'PYEOF'
import json, sys
sys.path.insert(0, "tests")
from gpusim import artifacts
out = {}
for version in sys.argv[2:]:
    path = artifacts.write_driver_runfile(sys.argv[1], version)
    out[version] = {"source": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
print(json.dumps({"nvidia_driver_runfiles": out}))
PYEOF
)

export SLURM_CONF=$WORKDIR/slurm/etc/slurm.conf
demo_before_rollout

echo
echo "== rolling out the BOM: ansible-playbook playbooks/upgrade.yml ($DEMO_ROLLOUT_SAYS)"
ROLLOUT=$REPORTS/rollout
set +e
"$REPO/.venv/bin/ansible-playbook" -i "$WORKDIR/inventory/hosts.yml" playbooks/upgrade.yml -f 24 -e "$RUNFILES" \
  -e "gpufleet_report_dir=$ROLLOUT" -e "gpufleet_stop_file=$WORKDIR/gpufleet.stop" \
  -e "$DEMO_ROLLOUT_VARS"
rc=$?
set -e

echo
echo "== the rollout's report (also $ROLLOUT/rollout-report.html with its timeline, .json, rollout-junit.xml, nodes/*.json)"
cat "$ROLLOUT/rollout-report.md"
echo
demo_after_rollout
exit $rc
