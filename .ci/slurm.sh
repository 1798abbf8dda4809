#!/usr/bin/env bash
# A single-node Slurm on 127.0.0.1 for the Slurm tests (tests/test_search_slurm.py); idempotent.
#   .ci/slurm.sh [start]   prints the slurm.conf to use as SLURM_CONF (and TLMSEARCH_TEST_SLURM),
#                          e.g. export SLURM_CONF=$(.ci/slurm.sh start)
#   .ci/slurm.sh stop      stops the daemons if (and only if) `start` started them: the same
#                          SERVICES_OWNER (.ci/with-services.sh sets it to its pid), so a
#                          second concurrent test run never stops the first one's Slurm
# Debian/Ubuntu with root (CI containers); installs slurm-wlm and munge with apt when missing.
# Everything lives under one folder of its own (its own munge socket and key, state, logs,
# ports 6917/6918), so it neither needs nor touches a system Slurm or munge.
set -euo pipefail
ROOT=${TLMSEARCH_SLURM_ROOT:-${TMPDIR:-/tmp}/tlmsearch-slurm}
CONF=$ROOT/slurm.conf
MARK=$ROOT/started
OWNER=${SERVICES_OWNER:-$PPID}

# $1: a pid file, $2: the daemon's name: a pid reused by another process is left alone
ours() { [ -f "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }

stop_pidfile() {
  if ours "$1" "$2"; then
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$1"
}

if [ "${1:-start}" = stop ]; then
  if [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$OWNER" ]; then
    stop_pidfile "$ROOT/slurmd.pid" slurmd
    stop_pidfile "$ROOT/slurmctld.pid" slurmctld
    stop_pidfile "$ROOT/munged.pid" munged
    rm -f "$MARK"
  fi
  exit 0
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >&2
fi
mkdir -p "$ROOT"/{ctld,spool,munge}
chmod 700 "$ROOT/munge"
if [ ! -s "$ROOT/munge/munge.key" ]; then
  dd if=/dev/urandom of="$ROOT/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$ROOT/munge/munge.key"
fi
NODE=$(hostname -s)
CPUS=$(nproc)
MEM=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat > "$CONF" <<EOF
ClusterName=tlmci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6917
SlurmdPort=6918
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$ROOT/munge/munge.socket
StateSaveLocation=$ROOT/ctld
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$ROOT/slurmctld.pid
SlurmdPidFile=$ROOT/slurmd.pid
SlurmctldLogFile=$ROOT/slurmctld.log
SlurmdLogFile=$ROOT/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
InactiveLimit=0
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
export SLURM_CONF=$CONF
started=""
if ! ours "$ROOT/munged.pid" munged; then
  munged --key-file="$ROOT/munge/munge.key" --socket="$ROOT/munge/munge.socket" \
    --pid-file="$ROOT/munged.pid" --log-file="$ROOT/munged.log" \
    --seed-file="$ROOT/munge/munged.seed" --force >&2
  started=1
fi
if ! ours "$ROOT/slurmctld.pid" slurmctld; then
  slurmctld -c >&2  # -c: a clean start (no jobs of an earlier CI run)
  started=1
fi
if ! ours "$ROOT/slurmd.pid" slurmd; then
  slurmd >&2
  started=1
fi
[ -n "$started" ] && echo "$OWNER" > "$MARK"
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "$CONF"
    exit 0
  fi
  sleep 0.5
done
echo "slurm.sh: the node did not come up; see $ROOT/slurmctld.log and $ROOT/slurmd.log" >&2
sinfo >&2 || true
exit 1
