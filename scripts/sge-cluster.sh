#!/usr/bin/env bash
# sge-cluster.sh - a real Grid Engine cluster (Debian gridengine 8.1.9 = Son of Grid Engine) on ONE
# machine, for fiber's tests of the sge backend. Run as root. Adapted from
# ../shared/tools/sge-cluster.sh (what was found there holds here; only names, network, queues
# and the subcommands below differ).
#
#   sge-cluster.sh install            apt-get install gridengine-master/-exec/-client, iproute2
#                                     (~15-45 s); a no-op (< 1 s) when already installed
#   sge-cluster.sh start [N]          sge_qmaster and N sge_execd "hosts" node1..N (default 3,
#                                     ~3 s); waits until every queue instance has reported,
#                                     exits non-zero otherwise. Idempotent: only daemons that
#                                     are not running are started (a crashed node comes back)
#   sge-cluster.sh stop               stop everything this script started, delete namespaces,
#                                     bridge and cluster state (job ids restart at 1)
#   sge-cluster.sh status             "sge_qmaster: up|down", then qhost / qstat -f
#   sge-cluster.sh env                the exports clients need (eval it before qsub/qstat/...),
#                                     and FIBER_SGE_DRIVER_ADDR (where a test master listens)
#   sge-cluster.sh smoke              quick end-to-end test (qsub -sync y per node, exit code,
#                                     array job spread over nodes, qstat, qdel, qacct, cross-node
#                                     TCP, job -> driver TCP)
#   sge-cluster.sh crash I            kill -9 every process of node I (sge_execd, shepherds, jobs)
#   sge-cluster.sh restart-node I     start node I's sge_execd again (after a crash)
#   sge-cluster.sh partition I on|off cut node I off the bridge / reconnect it
#
# Layout: sge_qmaster runs in network namespace fsge-ctl ($NET.2, hostname ctl), every sge_execd
#   in its own network + UTS namespace fsge-nodeI ($NET.(10+I), hostname nodeI), joined by bridge
#   fsgebr0 whose root-side address $NET.1 is named "fsgeroot". Namespaces have NO default route.
#   (Names and network are this script's own: the Slurm cluster uses fbs-*/10.201, the netns test
#   hosts fbt*/10.202, the Docker engine 10.203, the Kubernetes node fiberk8s/10.205-206, the
#   shared tool fg-*.) Everything lives under $DIR: SGE_ROOT=$DIR/root (symlinks to the
#   packaged binaries plus the cell "fiber"), classic (flat file) spooling in $DIR/spool/qmaster,
#   execd spool $DIR/spool/execd/<host> (one per host), job TMPDIRs in $DIR/tmp. The packages'
#   own cell (/var/lib/gridengine/default, /var/spool/gridengine) is never used.
#
# Queues: all.q (every node, $SLOTS slots each, parallel environment "smp" with allocation rule
#   $pe_slots) takes every job that names no project; wide.q (every node, $WIDE_SLOTS slots
#   each: one-slot jobs share a core, as Slurm's partition "wide" in slurm-cluster.sh) takes only
#   jobs of project "wide" (qsub -P wide), which all.q refuses. Tests of large pools (a
#   128-task array job) use it; the other tests rely on all.q running no more jobs than it has
#   slots. Accounting is on (qacct, flushed every second).
#
# Host names: SGE insists that every peer's IP resolves to the very name the peer claims, on both
#   sides. Each namespace gets its own /etc/hosts ($DIR/etc/hosts, bind-mounted in a private
#   mount namespace, with a `hosts: files` nsswitch.conf: no lookup can go to DNS). The root
#   namespace's /etc/hosts is left alone, so the clients (qsub, qstat, ...) cannot resolve "ctl"
#   there: `env` puts $DIR/bin first in PATH, whose wrappers run the real client in a private
#   mount + UTS namespace (hostname fsgeroot, same hosts file; still the root network namespace,
#   reaching the qmaster over the bridge; ~15 ms extra). Inside the node namespaces (jobs that
#   submit jobs) the wrappers just exec the real client. Always use them: a bare /usr/bin/qsub in
#   the root namespace would ask DNS for "ctl". The root namespace cannot resolve nodeI either:
#   use $NET.(10+I); jobs reach the driver as fsgeroot ($NET.1).
#
# Settings needed (all applied by `start`): min_uid/min_gid 0 (jobs run as root); schedule_interval
#   1 s + flush_submit/finish_sec 1 (qsub -sync y of a trivial job ~1 s instead of ~15 s);
#   load_report_time 1 s (the execd sends at most one report per second and only on a report
#   tick, so with the default 40 s / even 5 s a qdel'd job lingered 5-10 s in qstat; now ~1 s);
#   load_thresholds NONE (the machine's load, shared by all "hosts", would otherwise put the queue
#   in alarm state); accounting flush_time 1 s (qacct sees a job ~1 s after it ends, not 15 s);
#   shell_start_mode unix_behavior (the script's #! line is honoured, like Slurm) and
#   login_shells none (no /etc/profile: PATH from -V/-v survives); a distinct gid_range per node
#   and ENABLE_ADDGRP_KILL=true (qdel also kills processes that left the job's process group,
#   never another node's); max_unheard $MAX_UNHEARD s (a crashed or cut-off node shows state "u"
#   after about that plus a few s); queue `notify` $NOTIFY s (qsub -notify: SIGUSR2 / SIGUSR1
#   this long before SIGKILL / SIGSTOP).
# Job command lines: `qsub -b y cmd args` joins the args with spaces and runs them with `sh -c`:
#   quote each argument yourself (shlex.quote) and put no newline in them (use a script file).
#
# Limits (measured; all signals go to the job's whole process group):
#   `-l h_rt=T` -> SIGKILL at ~T+1 s, no warning; qacct failed 37, exit_status 137.
#   `-notify -l h_rt=T` -> SIGUSR2 at ~T+1 s, SIGKILL $NOTIFY s later. qdel of a -notify job:
#   SIGUSR2 at once, SIGKILL $NOTIFY s later. `-l s_rt=S` -> SIGUSR1 at ~S+1 s, repeated every
#   ~91 s; after each SIGUSR1 the execd postpones any h_rt kill by 90 s.
# A job on a crashed node stays "r" (no rescheduling unless submitted with -r y and
#   reschedule_unknown set) while its queue instance turns "u" (unknown) after max_unheard;
#   qdel leaves it "dr", `qdel -f JOB` removes it (qacct then shows failed 0 / exit 0), or
#   `start N` / `restart-node I` restarts the execd, which reports it failed ("19 : before
#   writing exit_status").
# Environment: FIBER_SGE_DIR (default /tmp/fiber-sge-cluster), FIBER_SGE_NET (first three octets
#   of the /24, default 10.207.0), FIBER_SGE_SLOTS (slots per node in all.q, default 2),
#   FIBER_SGE_WIDE_SLOTS (in wide.q, default 64), FIBER_SGE_NOTIFY (default 5),
#   FIBER_SGE_MAX_UNHEARD (default 10), FIBER_SGE_QMASTER_PORT / FIBER_SGE_EXECD_PORT (default
#   6444 / 6445, inside the namespaces), FIBER_SGE_START_TIMEOUT (default 30 s).
# Only processes started by this script (pid files, and processes inside its own namespaces)
# are ever signalled.
set -euo pipefail

DIR=${FIBER_SGE_DIR:-/tmp/fiber-sge-cluster}
NET=${FIBER_SGE_NET:-10.207.0}
SLOTS=${FIBER_SGE_SLOTS:-2}
WIDE_SLOTS=${FIBER_SGE_WIDE_SLOTS:-64}
NOTIFY=${FIBER_SGE_NOTIFY:-5}
MAX_UNHEARD=${FIBER_SGE_MAX_UNHEARD:-10}
QMASTER_PORT=${FIBER_SGE_QMASTER_PORT:-6444}
EXECD_PORT=${FIBER_SGE_EXECD_PORT:-6445}
START_TIMEOUT=${FIBER_SGE_START_TIMEOUT:-30}
BR=fsgebr0
CELL=fiber
R=$DIR/root
SB=/usr/lib/gridengine   # the real binaries (/usr/bin/q* are wrappers that default to the Debian cell)
export SGE_ROOT=$R SGE_CELL=$CELL SGE_QMASTER_PORT=$QMASTER_PORT SGE_EXECD_PORT=$EXECD_PORT

log() { echo "[sge-cluster] $*" >&2; }

# alive PID: exists and is not a zombie (PID 1 here reaps daemonized children lazily)
alive() {
  local p=$1 st
  [ -n "$p" ] && [ -r /proc/$p/stat ] || return 1
  st=$(awk '{print $3}' /proc/$p/stat 2>/dev/null) || return 1
  [ "$st" != Z ]
}

pid_from() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }

nodes_file() { cat "$DIR/nodes" 2>/dev/null || echo 0; }

hms() { printf '%02d:%02d:%02d' $(($1 / 3600)) $(($1 % 3600 / 60)) $(($1 % 60)); }

ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

quiet() { local o; o=$("$@" 2>&1) || { log "failed: $* : $o"; return 1; }; }  # qconf chatters on stderr

cmd_install() {
  local t0=$SECONDS pkgs="gridengine-master gridengine-exec gridengine-client iproute2 procps util-linux" prc=""
  [ -x $SB/sge_qmaster ] && [ -x $SB/sge_execd ] && [ -x $SB/qsub ] && command -v ip >/dev/null \
    && { log "already installed"; return; }
  export DEBIAN_FRONTEND=noninteractive
  # the postinsts would start the Debian-cell daemons (and exim4) where invoke-rc.d can: forbid it
  # for the duration of the install unless a policy already exists
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    prc=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $prc; chmod 755 $prc
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null || { [ -z "$prc" ] || rm -f $prc; exit 1; }
  [ -z "$prc" ] || rm -f $prc
  log "installed in $((SECONDS - t0)) s"
}

setup_net() {  # bridge + one namespace per host + the shared hosts/nsswitch files; idempotent
  local n=$1 i
  mkdir -p $DIR/etc
  { echo "127.0.0.1 localhost"; echo "$NET.1 fsgeroot"; echo "$NET.2 ctl"
    for i in $(seq 1 $n); do echo "$NET.$((10 + i)) node$i"; done; } > $DIR/etc/hosts
  sed 's/^hosts:.*/hosts:          files/' /etc/nsswitch.conf > $DIR/etc/nsswitch.conf
  ip link show $BR >/dev/null 2>&1 || {
    ip link add $BR type bridge
    # a fixed MAC: a bridge without one takes its lowest port's, and changes it as ports
    # come and go (pods, containers); its hosts' ARP entries then point at nothing for
    # ~30 s, and every connection through it stalls (fiber counts their jobs lost)
    ip link set $BR address "$(printf '02:fb:%02x:%02x:%02x:01' ${NET//./ })"
    ip addr add $NET.1/24 dev $BR
    ip link set $BR up
  }
  mk_ns() {  # mk_ns NAME IP
    local ns=$1 addr=$2 veth=fsgev-${1#fsge-}
    ip netns list | grep -qw "^$ns" || ip netns add $ns
    if ! ip link show $veth >/dev/null 2>&1; then
      ip link add $veth type veth peer name eth0 netns $ns
      ip link set $veth master $BR up
      ip -n $ns addr add $addr/24 dev eth0
      ip -n $ns link set eth0 up
      ip -n $ns link set lo up
    fi
  }
  mk_ns fsge-ctl $NET.2
  for i in $(seq 1 $n); do mk_ns fsge-node$i $NET.$((10 + i)); done
}

# in_ns NETNS|- HOSTNAME CMD...: run CMD in our network namespace ("-": the root one) with its own
# hostname and our hosts/nsswitch files. Not `ip netns exec` (it remounts /sys), as in slurm-cluster.sh.
in_ns() {
  local ns=$1 h=$2 pre=()
  shift 2
  [ "$ns" = - ] || pre=(nsenter --net=/run/netns/$ns --)
  "${pre[@]}" unshare --uts --mount --propagation private -- \
    sh -c 'mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/nsswitch.conf" /etc/nsswitch.conf \
      && hostname "$1" && shift && exec "$@"' $DIR/etc "$h" "$@"
}
ctl() { in_ns fsge-ctl ctl $SB/"$@"; }   # a client command on the qmaster host (always admin host)
q() { in_ns - fsgeroot $SB/"$@"; }       # a client command from the root namespace

write_wrappers() {  # $DIR/bin/q*: clients usable from the root namespace (see header)
  local b=$DIR/bin c
  mkdir -p $b
  cat > $b/.sge-client <<EOF
#!/bin/sh
# generated by sge-cluster.sh: run Grid Engine client \$1 so that the cluster's host names resolve
export SGE_ROOT=$R SGE_CELL=$CELL SGE_QMASTER_PORT=$QMASTER_PORT SGE_EXECD_PORT=$EXECD_PORT
p=$SB/\$1; shift
# inside a node/ctl namespace (a job submitting a job) our hosts file is already mounted
cmp -s /etc/hosts $DIR/etc/hosts && exec "\$p" "\$@"
exec unshare --uts --mount --propagation private -- sh -c 'mount --bind "\$0/hosts" /etc/hosts &&
  mount --bind "\$0/nsswitch.conf" /etc/nsswitch.conf && hostname fsgeroot && exec "\$@"' $DIR/etc "\$p" "\$@"
EOF
  chmod 755 $b/.sge-client
  for c in qacct qalter qconf qdel qhold qhost qlogin qmod qping qquota qrdel qresub qrls qrsh \
           qrstat qrsub qselect qsh qstat qsub; do
    printf '#!/bin/sh\nexec %s %s "$@"\n' "$b/.sge-client" $c > $b/$c; chmod 755 $b/$c
  done
}

init_cell() {  # bootstrap + flat-file spool of a new cluster (only when none exists)
  local n=$1 c=$R/$CELL/common
  [ -f $DIR/spool/qmaster/.initialized ] && return
  rm -rf $R $DIR/spool $DIR/tmp
  mkdir -p $c $DIR/spool/qmaster $DIR/spool/execd $DIR/tmp $DIR/etc $DIR/log
  chmod 755 $DIR; chmod 1777 $DIR/tmp
  for x in bin lib utilbin; do ln -s /var/lib/gridengine/$x $R/$x; done
  ln -s /usr/share/gridengine/util $R/util
  cat > $c/bootstrap <<EOF
# Version: 8.1.9
admin_user              sgeadmin
default_domain          none
ignore_fqdn             false
spooling_method         classic
spooling_lib            libspoolc
spooling_params         $c;$DIR/spool/qmaster
binary_path             /usr/sbin
qmaster_spool_dir       $DIR/spool/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
EOF
  sed -e "s#^execd_spool_dir .*#execd_spool_dir $DIR/spool/execd#" \
      -e 's#^mailer .*#mailer /bin/true#' -e 's#^xterm .*#xterm /bin/true#' \
      -e 's/^min_uid .*/min_uid 0/' -e 's/^min_gid .*/min_gid 0/' -e 's/^login_shells .*/login_shells none/' \
      -e 's/^load_report_time .*/load_report_time 00:00:01/' \
      -e "s/^max_unheard .*/max_unheard $(hms $MAX_UNHEARD)/" \
      -e 's/^execd_params .*/execd_params ENABLE_ADDGRP_KILL=true/' \
      -e 's/flush_time=[0-9:]*/flush_time=00:00:01/' \
      /usr/share/gridengine/default-configuration > $DIR/etc/global.conf
  ( cd $DIR
    $SB/spoolinit classic libspoolc "$c;$DIR/spool/qmaster" init
    $SB/spooldefaults configuration $DIR/etc/global.conf
    $SB/spooldefaults complexes /usr/share/gridengine/util/resources/centry
    $SB/spooldefaults usersets /usr/share/gridengine/util/resources/usersets
    $SB/spooldefaults managers sgeadmin ) >/dev/null
  # the daemons drop to admin_user sgeadmin: it must own the cell and the spool
  chown -R sgeadmin:sgeadmin $R/$CELL $DIR/spool
  touch $DIR/spool/qmaster/.initialized
}

queue_conf() {  # queue_conf NAME SLOTS PROJECTS XPROJECTS: a cluster queue over every node
  { cat <<EOF
qname $1
hostlist @allhosts
seq_no 0
load_thresholds NONE
suspend_thresholds NONE
nsuspend 1
suspend_interval 00:05:00
priority 0
min_cpu_interval 00:05:00
processors UNDEFINED
qtype BATCH INTERACTIVE
ckpt_list NONE
pe_list smp
rerun FALSE
slots $2
tmpdir $DIR/tmp
shell /bin/sh
prolog NONE
epilog NONE
shell_start_mode unix_behavior
starter_method NONE
suspend_method NONE
resume_method NONE
terminate_method NONE
notify $(hms $NOTIFY)
owner_list NONE
user_lists NONE
xuser_lists NONE
subordinate_list NONE
complex_values NONE
projects $3
xprojects $4
calendar NONE
initial_state default
EOF
    # no core files: a crash test's segfaulting job would leave one in its working directory
    echo "s_core 0"; echo "h_core 0"
    for l in rt cpu fsize data stack rss vmem; do echo "s_$l INFINITY"; echo "h_$l INFINITY"; done
  }
}

configure_cluster() {  # hosts, queue, PE, scheduler; once per cluster (the qmaster spools it)
  local n=$1 i e=$DIR/etc/conf
  [ -f $DIR/spool/qmaster/.configured ] && return
  mkdir -p $e
  quiet ctl qconf -ah fsgeroot; quiet ctl qconf -as fsgeroot
  for i in $(seq 1 $n); do
    printf 'hostname node%s\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\nxuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\nreport_variables NONE\n' $i > $e/exechost-node$i
    quiet q qconf -Ae $e/exechost-node$i
    quiet q qconf -as node$i     # jobs may submit jobs
    # per-host: a private range of additional group ids (process tracking / ENABLE_ADDGRP_KILL)
    printf 'gid_range %s-%s\n' $((20000 + 100 * i)) $((20099 + 100 * i)) > $e/node$i
    (cd $e && quiet q qconf -Aconf node$i)
  done
  printf 'group_name @allhosts\nhostlist %s\n' "$(seq -f 'node%g' -s ' ' 1 $n)" > $e/allhosts
  quiet q qconf -Ahgrp $e/allhosts
  cat > $e/smp <<'EOF'
pe_name            smp
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $pe_slots
control_slaves     FALSE
job_is_first_task  TRUE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
  quiet q qconf -Ap $e/smp
  printf 'name wide\noticket 0\nfshare 0\nacl NONE\nxacl NONE\n' > $e/wide.prj
  quiet q qconf -Aprj $e/wide.prj
  queue_conf all.q $SLOTS NONE wide > $e/all.q
  quiet q qconf -Aq $e/all.q
  queue_conf wide.q $WIDE_SLOTS wide NONE > $e/wide.q
  quiet q qconf -Aq $e/wide.q
  q qconf -ssconf | sed -e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
    -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' > $e/sched
  quiet q qconf -Msconf $e/sched
  touch $DIR/spool/qmaster/.configured
}

cmd_start() {
  local n=${1:-3} t0 i up
  t0=$(date +%s%N)
  [ -x $SB/sge_qmaster ] || cmd_install
  if [ "$(nodes_file)" != 0 ] && [ "$(nodes_file)" != "$n" ]; then
    log "cluster with $(nodes_file) nodes exists; stop it first"; exit 1
  fi
  setup_net $n
  init_cell $n
  mkdir -p $DIR; echo $n > $DIR/nodes
  if ! alive "$(pid_from $DIR/spool/qmaster/qmaster.pid)"; then
    in_ns fsge-ctl ctl /usr/sbin/sge_qmaster
    for _ in $(seq 100); do ctl qconf -sh >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  configure_cluster $n
  write_wrappers
  local started=()
  for i in $(seq 1 $n); do   # each sge_execd takes ~1 s to daemonize: start them side by side
    alive "$(pid_from $DIR/spool/execd/node$i/execd.pid)" && continue
    rm -f $DIR/spool/execd/node$i/execd.pid   # stale after a crash
    in_ns fsge-node$i node$i /usr/sbin/sge_execd &
    started+=($i)
  done
  wait
  # wait until the new execds have written their pid file and every queue instance has reported
  # (no "u"nknown state, a load value; after a crash the qmaster may still show the old values)
  for i in "${started[@]}"; do
    for _ in $(seq 100); do alive "$(pid_from $DIR/spool/execd/node$i/execd.pid)" && break; sleep 0.1; done
    alive "$(pid_from $DIR/spool/execd/node$i/execd.pid)" || log "sge_execd of node$i did not start (see $DIR/spool/execd/node$i/messages)"
  done
  up=0
  for _ in $(seq $((START_TIMEOUT * 10))); do
    up=$(q qstat -f -q all.q 2>/dev/null | awk '$1 ~ /^all.q@/ && $4 != "-NA-" && $6 !~ /u/' | wc -l)
    [ "$up" -ge "$n" ] && break
    sleep 0.1
  done
  q qstat -f -q all.q >&2 || true
  if [ "$up" -lt "$n" ]; then
    log "only $up of $n queue instances are up after $START_TIMEOUT s (qmaster: $DIR/spool/qmaster/messages, nodes: $DIR/spool/execd/*/messages)"
    exit 1
  fi
  log "started qmaster + $n execd in $(ms_since $t0) ms; eval \"\$($0 env)\" before using qsub/qstat/..."
}

cmd_stop() {
  local ns p f pids=()
  # 1. daemons by pid file (SIGTERM; they exit within a few s, the qmaster may take ~10 s)
  for f in $DIR/spool/execd/*/execd.pid $DIR/spool/qmaster/qmaster.pid; do
    [ -e "$f" ] || continue
    p=$(pid_from "$f"); alive "$p" && { kill -TERM "$p" 2>/dev/null || true; pids+=("$p"); }
  done
  for _ in $(seq 30); do
    local any=0; for p in "${pids[@]}"; do alive "$p" && any=1; done
    [ $any = 0 ] && break; sleep 0.1
  done
  # 2. everything still running inside our own namespaces (slow daemons, shepherds, jobs)
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^fsge-(ctl|node[0-9]+)$' || true); do
    for p in $(ip netns pids $ns 2>/dev/null); do kill -KILL $p 2>/dev/null || true; done
  done
  # 3. network (a namespace whose processes are gone takes its veth with it)
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^fsge-(ctl|node[0-9]+)$' || true); do
    ip netns del $ns 2>/dev/null || true
  done
  ip link show $BR >/dev/null 2>&1 && ip link del $BR || true
  # the kernel frees a deleted namespace (and its veth) asynchronously: wait, so that an
  # immediate `start` does not find a dying veth and skip creating it
  for _ in $(seq 50); do ip -br link | grep -q '^fsgev-' || break; sleep 0.1; done
  # 4. state: job ids restart at 1 with the next start
  rm -rf $DIR/spool $DIR/root $DIR/tmp $DIR/bin $DIR/etc/conf $DIR/nodes
  log "stopped"
}

cmd_status() {
  if alive "$(pid_from $DIR/spool/qmaster/qmaster.pid)"; then echo "sge_qmaster: up"
  else echo "sge_qmaster: down"; return 0; fi
  q qhost || true
  q qstat -f || true
}

cmd_smoke() {  # end-to-end checks, exit non-zero on failure
  local n i jid out W port=$((24000 + RANDOM % 1000)) t0 hosts
  n=$(nodes_file)
  [ "$n" -gt 0 ] || { echo "not started"; return 1; }
  eval "$(cmd_env)"
  W=$(mktemp -d $DIR/log/smoke.XXXXXX); cd $W
  for i in $(seq 1 $n); do
    echo "== qsub -sync y -b y on node$i"
    t0=$(date +%s%N)
    qsub -sync y -b y -l h=node$i -o $W/bin-$i.out -j y \
      python3 -c "'import socket; print(6*7, \"on\", socket.gethostname())'"
    echo "   ($(ms_since $t0) ms) output: $(cat $W/bin-$i.out)"
    grep -q "42 on node$i" $W/bin-$i.out || { echo "FAILED"; return 1; }
  done
  echo "== exit code of a job script (qsub -sync y returns it)"
  printf '#!/bin/bash\necho "script on $(hostname) as $JOB_ID"\nexit 3\n' > $W/exit3.sh
  set +e; qsub -sync y -o $W/exit3.out -j y $W/exit3.sh; out=$?; set -e
  echo "   qsub rc=$out output: $(cat $W/exit3.out)"; [ $out = 3 ] || { echo "FAILED"; return 1; }
  echo "== array job -t 1-6 (spread over the nodes)"
  t0=$(date +%s%N)
  qsub -sync y -b y -t 1-6 -o "$W/arr.\$TASK_ID" -j y sh -c "'echo \$SGE_TASK_ID \$(hostname); sleep 2'" | tail -1
  hosts=$(cat $W/arr.* | awk '{print $2}' | sort | uniq -c | tr -s ' ' | tr '\n' ',')
  echo "   ($(ms_since $t0) ms) tasks per host: $hosts"
  [ "$(cat $W/arr.* | wc -l)" = 6 ] || { echo "FAILED"; return 1; }
  [ "$n" -lt 2 ] || [ "$(cat $W/arr.* | awk '{print $2}' | sort -u | wc -l)" -ge 2 ] || { echo "not spread: FAILED"; return 1; }
  echo "== qstat + qdel of a running job"
  jid=$(qsub -terse -b y -o /dev/null -j y sleep 600)
  for _ in $(seq 100); do [ "$(qstat | awk -v j=$jid '$1==j{print $5}')" = r ] && break; sleep 0.1; done
  qstat
  t0=$(date +%s%N); qdel $jid
  for _ in $(seq 100); do qstat | awk '{print $1}' | grep -qx $jid || break; sleep 0.1; done
  echo "   gone from qstat after $(ms_since $t0) ms"
  echo "== qacct (accounting file, flushed every 1 s)"
  for _ in $(seq 50); do qacct -j $jid >/dev/null 2>&1 && break; sleep 0.2; done
  for j in $(qacct -j 2>/dev/null | awk '$1=="jobnumber"{print $2}' | sort -un); do
    qacct -j $j | awk -v j=$j '$1=="hostname"{h=$2} $1=="taskid"{t=($2=="undefined")?"":"."$2} $1=="failed"{f=$2} $1=="exit_status"{print "   job " j t " on " h ": failed " f ", exit_status " $2}'
  done
  qacct -j $jid | grep -q 'exit_status *137' || { echo "qdel'd job not exit_status 137: FAILED"; return 1; }
  if [ "$n" -ge 2 ]; then
    echo "== TCP from a job on node2 to a server job on node1"
    # (a -b y command line is joined with spaces and run by sh -c: no newlines, quote args yourself)
    printf '%s\n' 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)' \
      "s.bind(('0.0.0.0', $port)); s.listen(); print('listening', flush=True)" \
      "c, a = s.accept(); c.sendall(b'hello from ' + socket.gethostname().encode() + b' to ' + a[0].encode())" > $W/server.py
    printf '%s\n' "import socket; s = socket.create_connection(('node1', $port), timeout=5)" \
      "print(socket.gethostname(), 'got:', s.recv(100).decode())" > $W/client.py
    jid=$(qsub -terse -b y -l h=node1 -o $W/server.out -j y python3 $W/server.py)
    for _ in $(seq 100); do grep -qs listening $W/server.out && break; sleep 0.1; done
    qsub -sync y -b y -l h=node2 -o $W/client.out -j y python3 $W/client.py >/dev/null
    echo "   $(cat $W/client.out)"
    grep -q "hello from node1" $W/client.out || { echo "cross-node TCP FAILED"; return 1; }
  fi
  echo "== TCP from a job to the driver listening on $NET.1 (root namespace)"
  printf '%s\n' "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)" \
    "s.bind(('$NET.1', $((port + 1)))); s.listen(); s.settimeout(20)" \
    "c, a = s.accept(); print('   driver got:', c.recv(100).decode(), 'from', a[0])" > $W/driver.py
  printf '%s\n' "import socket, os; c = socket.create_connection(('fsgeroot', $((port + 1))), timeout=5)" \
    "c.sendall(('job %s on %s' % (os.environ['JOB_ID'], socket.gethostname())).encode())" > $W/tell.py
  python3 $W/driver.py &
  local drv=$!
  sleep 0.5
  qsub -sync y -b y -o /dev/null -j y python3 $W/tell.py >/dev/null
  wait $drv || { echo "job -> driver TCP FAILED"; return 1; }
  echo "SMOKE OK"
}

node_arg() {  # node_arg I: I names a node of the running cluster
  case "$1" in ''|*[!0-9]*) log "expected a node number, got '$1'"; exit 2 ;; esac
  [ "$1" -ge 1 ] && [ "$1" -le "$(nodes_file)" ] || { log "no node$1 (cluster of $(nodes_file) nodes)"; exit 2; }
}

cmd_env() {
  echo "export SGE_ROOT=$R SGE_CELL=$CELL SGE_QMASTER_PORT=$QMASTER_PORT SGE_EXECD_PORT=$EXECD_PORT PATH=$DIR/bin:\$PATH"
  echo "export FIBER_SGE_DRIVER_ADDR=$NET.1"
}

case "${1:-}" in
  install) cmd_install ;;
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  restart) shift; cmd_stop; cmd_start "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  smoke) cmd_smoke ;;
  crash) node_arg "${2:-}"; ip netns pids fsge-node$2 | xargs -r kill -KILL ;;
  restart-node) node_arg "${2:-}"; cmd_start "$(nodes_file)" ;;
  partition) node_arg "${2:-}"
    case "${3:-}" in on) ip link set fsgev-node$2 down ;; off) ip link set fsgev-node$2 up ;;
      *) log "partition I on|off"; exit 2 ;; esac ;;
  *) sed -n '2,84p' "$0"; exit 2 ;;
esac
