#!/usr/bin/env bash
# slurm-cluster.sh - start a real multi-node Slurm cluster (Debian slurm-wlm 22.05) on ONE machine,
# for fiber's tests. Run as root.
#
#   slurm-cluster.sh install          apt-get install slurm-wlm, munge, iproute2 (update only if
#                                     needed); a no-op (< 1 s) when already installed
#   slurm-cluster.sh start [N]        munged + slurmctld + N slurmd (default 3); waits until all N
#                                     nodes are idle, exits non-zero with log excerpts otherwise
#                                     (then run `stop` to clean up what did start).
#                                     Idempotent: only daemons that are not running are started.
#   slurm-cluster.sh stop             kill everything this script started, delete namespaces,
#                                     bridge and Slurm state (idempotent)
#   slurm-cluster.sh status           daemons, sinfo, squeue
#   slurm-cluster.sh env              print "export SLURM_CONF=..." (eval it before sbatch/squeue/...)
#                                     and FIBER_SLURM_DRIVER_ADDR (root-namespace bridge address)
#   slurm-cluster.sh crash I          kill -9 every process of nodeI (slurmd, slurmstepd, job tasks)
#   slurm-cluster.sh partition I on|off   on: cut nodeI off the bridge; off: reconnect it
#   slurm-cluster.sh restart-node I   (re)start nodeI's slurmd (after crash, or restart a live one)
#
# Layout: bridge fbslurm0 with $NET.1 in the ROOT namespace (a test driver listens there; jobs
# connect back to it; "fbroot" in the nodes' /etc/hosts). slurmctld runs in namespace fbs-ctl ($NET.2, hostname "ctl"); slurmd I runs
# in fbs-nodeI ($NET.(10+I), hostname "nodeI"). Namespaces have NO default route: nothing leaves
# the machine. Clients (sbatch, squeue, scontrol) run in the root namespace. Every node sees the
# same filesystem, so a virtualenv anywhere (e.g. under /tmp) is usable from jobs on any node.
#
# Facts about this sandbox (Debian bookworm, root, 2 cores, no systemd, cgroup v1 mounted):
# - cgroups are not used: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none.
# - `ip netns exec` remounts /sys, which hides /sys/fs/cgroup, and slurmd 22.05 then refuses to
#   start ("No filesystem mounted on /sys/fs/cgroup") even without cgroup plugins. So namespaces
#   are entered with `nsenter --net=... unshare --uts --mount`, which keeps /sys, sets a hostname
#   and bind-mounts a per-namespace /etc/hosts. Mounts are private here, so filesystems mounted
#   in the root namespace AFTER a node started are not visible on that node.
# - munged needs a world-executable socket directory and a 0700 key directory owned by munge.
# - PID 1 reaps orphans lazily: a killed daemon may stay <defunct>, so liveness checks look at
#   the process state, not at `kill -0`.
# - Job states (squeue %T / scontrol JobState): PENDING, RUNNING, COMPLETED, FAILED (exit != 0,
#   Reason=NonZeroExitCode), CANCELLED, TIMEOUT, NODE_FAIL (Reason=NodeDown). `squeue -j ID`
#   omits finished jobs: use `squeue -t all` or `scontrol show job ID`.
# - Requeue: when a node stops answering (slurmd killed, or partitioned) its jobs' processes may
#   live on; a job submitted WITHOUT --no-requeue then goes back to PENDING (Restarts=1, later
#   Reason=BeginTime) and can start again elsewhere while the first copy still runs; with
#   --no-requeue it ends NODE_FAIL. A batch job whose launch fails is requeued even with
#   --no-requeue ("requeue per user/system request" in slurmctld.log).
# - No slurmdbd: `sacct` fails ("Slurm accounting storage is disabled"). Finished jobs stay in
#   `scontrol show job` / `squeue -t all` for MinJobAge s plus up to ~60 s (purge interval);
#   after that scontrol says "Invalid job id specified". Every finished job is also appended to
#   $DIR/log/jobcomp.txt (jobcomp/filetxt). Logs are kept after `stop`, wiped by a fresh start.
# - slurmd logs "can not load PMIx library" errors at start: harmless (MpiDefault=none).
# - Two partitions over all nodes: "debug" (the default; a job gets its CPUs to itself) and
#   "wide" (OverSubscribe=FORCE:$FIBER_SLURM_OVERSUBSCRIBE, default 64: that many jobs share
#   a core, so 3 nodes x 2 CPUs run 384 one-CPU jobs at once; memory is not scheduled,
#   SelectTypeParameters=CR_Core). Tests of large pools (a 128-worker job array) use "wide";
#   the other tests rely on "debug" running no more jobs than it has CPUs.
# - Preemption: PreemptType=preempt/partition_prio, PreemptMode=CANCEL; partition "urgent"
#   (PriorityTier=10, not default) preempts jobs of "debug" and "wide": a job of "urgent" that
#   needs a node's CPUs cancels what runs there (SIGTERM to the job's processes, SIGKILL
#   KillWait=5 s later; state PREEMPTED). Nothing else submits to "urgent". Partition
#   "requeue" preempts with PreemptMode=REQUEUE instead: a job submitted --no-requeue, as
#   fiber's are, is then cancelled all the same.
# - Node failure detection (crash, or partition): with SlurmdTimeout=5 + MessageTimeout=10 (the
#   defaults here) sinfo shows "allocated*"/"idle*" after ~12 s and "down* Not responding" (jobs
#   NODE_FAIL) after ~25 s (MessageTimeout=3: ~6 s and ~12 s). A restarted slurmd is idle again
#   within ~0.1 s (ReturnToService=2), a reconnected node within ~1.5 s; on re-registering, the
#   node kills leftover processes of jobs that were already marked NODE_FAIL.
# - Priority: slurmctld and the slurmds run at nice -10, the jobs at the nice of the command
#   that submitted them (PropagatePrioProcess=1), as on a cluster whose daemons the jobs do
#   not starve. At nice 0, with a CI run's other lanes on the same 2 CPUs (load 20-30), the
#   three nodes went "not responding" past SlurmdTimeout=5 while a pool of 128 one-CPU jobs
#   started, and their jobs ended NODE_FAIL (2026-12-02).
# - MessageTimeout is Slurm's default, 10 s. At 3 s, a node that took longer than that to
#   answer slurmctld's batch launch under load (128 array tasks starting at once beside 40
#   busy processes) logged "Could not confirm batch launch for job N, aborting request" then
#   "Could not launch job N and not able to requeue it, cancelling job": the task ended
#   CANCELLED (or NODE_FAIL) before it ran: 2 tasks in 4 such starts; at 10 s, none in 3.
#
# Environment: FIBER_SLURM_DIR (state, default /tmp/fiber-slurm), FIBER_SLURM_NET (first three
# octets of a /24, default 10.201.0), FIBER_SLURM_CPUS (CPUs per node, default 2), FIBER_SLURM_MEM
# (MB per node, default RAM/N), FIBER_SLURM_SLURMD_TIMEOUT (default 5), FIBER_SLURM_MSG_TIMEOUT
# (default 10), FIBER_SLURM_MIN_JOB_AGE (default 300), FIBER_SLURM_START_TIMEOUT (default 60 s),
# FIBER_SLURM_OVERSUBSCRIBE (jobs a core in partition "wide", default 64).
# Only processes this script started (pid files it owns, processes inside its namespaces) are
# ever signalled.
set -euo pipefail

DIR=${FIBER_SLURM_DIR:-/tmp/fiber-slurm}
NET=${FIBER_SLURM_NET:-10.201.0}
CPUS=${FIBER_SLURM_CPUS:-2}
MEM=${FIBER_SLURM_MEM:-}  # MB per node; default: physical memory / N (memory is not scheduled)
SLURMD_TIMEOUT=${FIBER_SLURM_SLURMD_TIMEOUT:-5}
MIN_JOB_AGE=${FIBER_SLURM_MIN_JOB_AGE:-300}
MSG_TIMEOUT=${FIBER_SLURM_MSG_TIMEOUT:-10}
DAEMON_NICE=-10  # slurmctld's and the slurmds' (see "Priority" above)
START_TIMEOUT=${FIBER_SLURM_START_TIMEOUT:-60}
OVERSUB=${FIBER_SLURM_OVERSUBSCRIBE:-64}
WIDE=wide
BR=fbslurm0
CONF=$DIR/etc/slurm.conf
export SLURM_CONF=$CONF

log() { echo "[slurm-cluster] $*" >&2; }
die() { echo "[slurm-cluster] ERROR: $*" >&2; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# alive PID [COMM]: running (not a zombie) and, if given, named COMM
alive() {
  local p=${1:-} st
  [[ $p =~ ^[0-9]+$ ]] && [ -r /proc/$p/stat ] || return 1
  st=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1) || return 1
  [ "$st" != Z ] || return 1
  [ -z "${2:-}" ] || [ "$(cat /proc/$p/comm 2>/dev/null)" = "$2" ]
}
pidof_file() { cat "$1" 2>/dev/null || true; }

# kill_pidfile FILE COMM: TERM (then KILL after 5 s) the process named COMM in FILE
kill_pidfile() {
  local p; p=$(pidof_file "$1")
  if alive "$p" "$2"; then
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}

ns_pids() { ip netns pids "$1" 2>/dev/null || true; }
our_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^fbs-(ctl|node[0-9]+)$' || true; }
node_count() { cat "$DIR/nodes" 2>/dev/null || echo 0; }
node_addr() { echo "$NET.$((10 + $1))"; }
check_node() {
  [[ ${1:-} =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(node_count)" ] \
    || die "no such node '${1:-}' (cluster has $(node_count) nodes)"
}

cmd_install() {
  local t0 pkgs="slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux procps"
  t0=$(now_ms)
  # shellcheck disable=SC2086
  if [ "$(dpkg-query -W -f='${Status}\n' $pkgs 2>/dev/null | grep -c 'install ok installed')" \
       -eq "$(wc -w <<< "$pkgs")" ]; then
    log "already installed"; return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-cache show slurm-wlm >/dev/null 2>&1 || apt-get update -qq
  # no systemd/init here: the postinst scripts cannot start services, which is what we want
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; } \
    || die "apt-get install $pkgs failed"
  log "installed in $(( $(now_ms) - t0 )) ms"
}

start_munge() {
  local m=$DIR/munge
  alive "$(pidof_file $m/run/munged.pid)" munged && return
  mkdir -p $m/etc $m/run $m/log $m/lib
  chmod 755 $m $m/run; chmod 700 $m/etc $m/log $m/lib
  [ -s $m/etc/munge.key ] || dd if=/dev/urandom of=$m/etc/munge.key bs=1024 count=1 status=none
  chmod 400 $m/etc/munge.key
  chown -R munge:munge $m
  rm -f $m/run/munge.sock
  runuser -u munge -- munged --socket=$m/run/munge.sock --key-file=$m/etc/munge.key \
    --log-file=$m/log/munged.log --pid-file=$m/run/munged.pid --seed-file=$m/lib/munged.seed \
    || die "munged failed to start: $(tail -3 $m/log/munged.log 2>/dev/null)"
  for _ in $(seq 50); do [ -S $m/run/munge.sock ] && return; sleep 0.1; done
  die "munged socket $m/run/munge.sock did not appear"
}

write_conf() {
  # Every clean start numbers jobs from here: a number that grows with the clock, so that a
  # job never gets the id (and with it the output file name) of a job of an earlier start,
  # whose file is still in slurm_output_dir (a test read its stale READY line so).
  local first_job_id=$(( ($(date +%s) / 4) % 16000000 + 1000 ))
  local n=$1 i mem=$MEM
  [ -n "$mem" ] || mem=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 / n ))
  mkdir -p $DIR/etc $DIR/state $DIR/spool $DIR/log $DIR/run $DIR/net
  {
    cat <<EOF
# generated by scripts/slurm-cluster.sh
ClusterName=fibertest
SlurmctldHost=ctl($NET.2)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/run/munge.sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=$SLURMD_TIMEOUT
PropagatePrioProcess=1
MessageTimeout=$MSG_TIMEOUT
InactiveLimit=0
MinJobAge=$MIN_JOB_AGE
FirstJobId=$first_job_id
KillWait=5
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
SlurmctldDebug=info
SlurmdDebug=info
EOF
    for i in $(seq 1 "$n"); do
      echo "NodeName=node$i NodeAddr=$(node_addr "$i") CPUs=$CPUS RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    echo "PartitionName=$WIDE Nodes=ALL Default=NO OverSubscribe=FORCE:$OVERSUB MaxTime=INFINITE State=UP"
    echo "PartitionName=requeue Nodes=ALL Default=NO PreemptMode=REQUEUE MaxTime=INFINITE State=UP"
    echo "PartitionName=urgent Nodes=ALL Default=NO PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP"
  } > "$CONF"
}

# mk_ns NS ADDR HOSTNAME N: namespace joined to the bridge through veth fbv-<suffix>
mk_ns() {
  local ns=$1 addr=$2 veth=fbv-${1#fbs-} j
  [ -e "/run/netns/$ns" ] || ip netns add "$ns"
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master $BR up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  fi
  { echo "127.0.0.1 localhost"; echo "$NET.1 fbroot"; echo "$NET.2 ctl"
    for j in $(seq 1 "$4"); do echo "$(node_addr "$j") node$j"; done; } > "$DIR/net/$ns.hosts"
}

setup_net() {
  local n=$1 i cur
  if ip link show $BR >/dev/null 2>&1; then
    cur=$(ip -4 -br addr show dev $BR | awk '{print $3}')
    [ "$cur" = "$NET.1/24" ] || die "bridge $BR exists with address '$cur', expected $NET.1/24"
  else
    [[ $'\n'$(ip -4 route show) != *$'\n'"$NET.0/24 "* ]] || die "$NET.0/24 is in use: set FIBER_SLURM_NET"
    ip link add $BR type bridge
    # a fixed MAC: a bridge without one takes its lowest port's, and changes it as ports
    # come and go (pods, containers); its hosts' ARP entries then point at nothing for
    # ~30 s, and every connection through it stalls (fiber counts their jobs lost)
    ip link set $BR address "$(printf '02:fb:%02x:%02x:%02x:01' ${NET//./ })"
    ip addr add "$NET.1/24" dev $BR
    ip link set $BR up
  fi
  mk_ns fbs-ctl "$NET.2" ctl "$n"
  for i in $(seq 1 "$n"); do mk_ns "fbs-node$i" "$(node_addr "$i")" "node$i" "$n"; done
}

# in_ns NS HOSTNAME CMD...: run CMD in our net namespace, a fresh UTS namespace (hostname) and a
# private mount namespace where only /etc/hosts differs. Not `ip netns exec` (see header).
in_ns() {
  local ns=$1 h=$2; shift 2
  nsenter --net=/run/netns/"$ns" -- unshare --uts --mount --propagation private -- \
    sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
    "$DIR/net/$ns.hosts" "$h" "$@"
}

start_slurmd() {  # start_slurmd I
  local i=$1
  alive "$(pidof_file $DIR/run/slurmd-node$i.pid)" slurmd && return
  mkdir -p $DIR/spool/node$i
  in_ns "fbs-node$i" "node$i" nice -n "$DAEMON_NICE" slurmd -N "node$i" \
    || die "slurmd node$i failed to start:"$'\n'"$(tail -5 $DIR/log/slurmd-node$i.log 2>/dev/null)"
}

cmd_start() {
  local n=${1:-3} t0 i idle=0 deadline
  [[ $n =~ ^[1-9][0-9]?$ ]] || die "bad node count '$n' (1..99)"
  t0=$(now_ms)
  [ "$(id -u)" = 0 ] || die "must run as root"
  command -v slurmctld >/dev/null && command -v munged >/dev/null || cmd_install
  if [ "$(node_count)" != 0 ] && [ "$(node_count)" != "$n" ]; then
    die "a cluster with $(node_count) nodes is up in $DIR; run 'stop' first"
  fi
  # fresh cluster: job ids restart at 1, so old logs/jobcomp records would be misleading
  if [ "$(node_count)" = 0 ]; then rm -rf $DIR/log; fi
  mkdir -p $DIR; echo "$n" > $DIR/nodes
  write_conf "$n"
  start_munge
  setup_net "$n"
  if ! alive "$(pidof_file $DIR/run/slurmctld.pid)" slurmctld; then
    # -c: clean start, no job state from an earlier run
    in_ns fbs-ctl ctl nice -n "$DAEMON_NICE" slurmctld -c \
      || die "slurmctld failed to start:"$'\n'"$(tail -5 $DIR/log/slurmctld.log 2>/dev/null)"
  fi
  for i in $(seq 1 "$n"); do start_slurmd "$i"; done
  deadline=$(( $(now_ms) + START_TIMEOUT * 1000 ))
  while [ "$(now_ms)" -lt "$deadline" ]; do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" -ge "$n" ] && break
    sleep 0.1
  done
  if [ "$idle" -lt "$n" ]; then
    sinfo -N -l >&2 || true
    alive "$(pidof_file $DIR/run/slurmctld.pid)" slurmctld || log "slurmctld is NOT running"
    for f in $DIR/log/slurmctld.log $DIR/log/slurmd-node*.log; do
      if [ -f "$f" ]; then echo "--- $f" >&2; tail -5 "$f" >&2; fi
    done
    die "only $idle of $n nodes idle after ${START_TIMEOUT} s"
  fi
  sinfo -N
  log "started $n nodes in $(( $(now_ms) - t0 )) ms; driver address $NET.1; export SLURM_CONF=$CONF"
}

cmd_stop() {
  local ns p f t0
  t0=$(now_ms)
  for f in "$DIR"/run/slurmd-*.pid; do if [ -e "$f" ]; then kill_pidfile "$f" slurmd; fi; done
  kill_pidfile $DIR/run/slurmctld.pid slurmctld
  # whatever is left inside our namespaces: slurmstepd, job tasks, crashed/partitioned daemons
  for ns in $(our_namespaces); do
    for p in $(ns_pids "$ns"); do kill -KILL "$p" 2>/dev/null || true; done
  done
  kill_pidfile $DIR/munge/run/munged.pid munged
  for ns in $(our_namespaces); do
    for _ in $(seq 30); do [ -z "$(ns_pids "$ns")" ] && break; sleep 0.1; done
    ip netns del "$ns" 2>/dev/null || true
  done
  if ip link show $BR >/dev/null 2>&1; then ip link del $BR; fi
  # job ids restart at 1 with `slurmctld -c`: drop spool/state so nothing stale is mixed in
  rm -rf $DIR/state $DIR/spool $DIR/run $DIR/net $DIR/etc $DIR/nodes
  log "stopped in $(( $(now_ms) - t0 )) ms"
}

cmd_status() {
  local i
  if [ "$(node_count)" = 0 ]; then echo "no cluster in $DIR"; return; fi
  echo "munged:    $(alive "$(pidof_file $DIR/munge/run/munged.pid)" munged && echo up || echo DOWN)"
  echo "slurmctld: $(alive "$(pidof_file $DIR/run/slurmctld.pid)" slurmctld && echo up || echo DOWN)"
  for i in $(seq 1 "$(node_count)"); do
    echo "node$i ($(node_addr "$i")): slurmd $(alive "$(pidof_file $DIR/run/slurmd-node$i.pid)" slurmd \
      && echo up || echo DOWN), link $(ip -br link show fbv-node$i 2>/dev/null | awk '{print $2}')"
  done
  sinfo -N -l || true
  squeue -t all || true
}

cmd_crash() {
  check_node "${1:-}"
  local p pids; pids=$(ns_pids "fbs-node$1")
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  log "node$1: killed $(echo $pids | wc -w) processes"
}

cmd_partition() {
  check_node "${1:-}"
  case "${2:-}" in
    on) ip link set "fbv-node$1" down; log "node$1 cut off" ;;
    off) ip link set "fbv-node$1" up; log "node$1 reconnected" ;;
    *) die "usage: partition I on|off" ;;
  esac
}

cmd_restart_node() {
  check_node "${1:-}"
  local t0; t0=$(now_ms)
  kill_pidfile $DIR/run/slurmd-node$1.pid slurmd
  start_slurmd "$1"
  log "node$1: slurmd started in $(( $(now_ms) - t0 )) ms (idle once slurmctld hears from it)"
}

case "${1:-}" in
  install) cmd_install ;;
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF"; echo "export FIBER_SLURM_DRIVER_ADDR=$NET.1" ;;
  crash) cmd_crash "${2:-}" ;;
  partition) cmd_partition "${2:-}" "${3:-}" ;;
  restart-node) cmd_restart_node "${2:-}" ;;
  *) sed -n '2,/^# Layout/{/^# Layout/!p}' "$0"; exit 2 ;;
esac
