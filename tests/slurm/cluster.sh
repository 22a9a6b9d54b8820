#!/usr/bin/env bash
# A one-node Slurm cluster for the tests: munged, slurmctld and slurmd from the Debian packages, in a directory of
# their own (nothing under /etc/slurm is touched). Usage:
#   tests/slurm/cluster.sh start DIR   -> prints SLURM_CONF=DIR/slurm.conf and the node's name; exit 0 when sinfo answers
#   tests/slurm/cluster.sh stop DIR
# Needs root (slurmd runs jobs as their users) and the packages slurmctld slurmd slurm-client munge.
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
node=$(hostname -s)
if [ "$cmd" = stop ]; then
  for f in slurmd slurmctld munged; do
    [ -f "$dir/$f.pid" ] && kill "$(cat "$dir/$f.pid")" 2>/dev/null || true
  done
  exit 0
fi
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null || {
  echo "slurm or munge is not installed" >&2; exit 3; }
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 700 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none; chmod 400 "$dir/munge/munge.key"; }
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
cat > "$dir/slurm.conf" <<CONF
ClusterName=dldtest
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
NodeName=$node CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N "$node"
for i in $(seq 1 40); do
  if sinfo -h -N -o "%N %t" 2>/dev/null | grep -q "^$node idle"; then
    echo "SLURM_CONF=$SLURM_CONF"; echo "NODE=$node"; exit 0
  fi
  sleep 0.5
done
echo "the cluster did not come up:" >&2; tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
exit 4
