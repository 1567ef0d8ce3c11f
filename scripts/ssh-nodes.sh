#!/usr/bin/env bash
# ssh-nodes.sh - N "hosts" on ONE machine, each a real sshd, for the tests of fiber's ssh backend.
# Run as root. Adapted from ../shared/tools/ssh-nodes.sh (the project carries its own copy).
#
#   ssh-nodes.sh install            apt-get install openssh-server, openssh-client, iproute2
#                                   (a no-op when they are installed; ~6 s otherwise)
#   ssh-nodes.sh start [N]          one sshd per host node1..N (default 3); waits until each one
#                                   answers. Idempotent: only the sshd that are not running start
#                                   (so `start N` also brings a crashed node back).
#   ssh-nodes.sh stop               stop everything this script started, delete namespaces/bridge
#   ssh-nodes.sh status             which sshd are up
#   ssh-nodes.sh env [SLOTS]        print the exports fiber and the tests need (eval it):
#                                   FIBER_SSH_HOSTS (node1:SLOTS,..., default 32 slots a host),
#                                   FIBER_SSH_CONFIG (the generated ssh_config),
#                                   FIBER_SSH_DRIVER_ADDR (where the master listens), and
#                                   FIBER_SSH_NODES_SH (this script, for the tests' faults)
#   ssh-nodes.sh smoke              python over ssh on every node, node -> driver TCP
#   ssh-nodes.sh crash I            kill -9 every process of node I (its sshd, its sessions and
#                                   everything started through them): a host that died
#   ssh-nodes.sh partition I on|off cut node I off the bridge / reconnect it
#   ssh-nodes.sh pids I             the pids of every process of node I, one a line
#
# Layout: bridge fsshbr0 with $NET.1 in the ROOT namespace, named "driver" inside the hosts (the
# fiber master listens there; jobs connect back to it). Host I is network namespace fssh-nodeI
# ($NET.(10+I), default NET 10.208.0) + UTS namespace (hostname nodeI) + private mount namespace
# (its own /etc/hosts and a `hosts: files` nsswitch.conf, bind-mounted, so names never go to
# DNS; and its own, empty, ~/.bashrc: bash reads it for every command run over ssh, and this
# machine's runs `pyenv init`, whose rehash lock 100 logins at once wait on for 60 s and
# complain about on stderr). Namespaces have NO default route: nothing leaves the machine. Every host sees this
# machine's filesystem, so fiber's virtualenv is at the same path on every host (a shared
# filesystem, as NFS home directories give a lab's workstations).
# sshd: key-only root login, UsePAM no, StrictModes no, one host key for all, AcceptEnv none
# (fiber sends what a job needs over the ssh channel, never as environment variables), the
# default MaxStartups (10:30:100: beyond 10 connections not yet authenticated sshd drops some,
# as a real host does; the backend starts at most ssh_max_startups at a time per host).
# Clients use the generated ssh_config (`ssh -F $FIBER_SSH_CONFIG node1 ...`): node names map
# to IPs there, so the root namespace (which cannot resolve nodeI) never looks them up.
# Not `ip netns exec` (it remounts /sys), as in slurm-cluster.sh.
# Only processes started by this script (pid files, and processes inside its own namespaces) are
# ever signalled; every name it creates starts with "fssh" (namespaces, bridge, veths).
#
# Environment: FIBER_SSH_DIR (state, default /tmp/fiber-ssh-nodes), FIBER_SSH_NET (the first
# three octets of the /24, default 10.208.0; 10.200-10.207 are the other engines': 10.206 is
# the Kubernetes node's pod network, and its stage runs while this one does).
set -euo pipefail

DIR=${FIBER_SSH_DIR:-/tmp/fiber-ssh-nodes}
NET=${FIBER_SSH_NET:-10.208.0}
BR=fsshbr0
NS=fssh-node      # namespace of host I: fssh-nodeI
VETH=fsshv-node   # root-side veth of host I: fsshv-nodeI

log() { echo "[ssh-nodes] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# alive PID: exists and is not a zombie (PID 1 here reaps daemonized children lazily)
alive() {
  local p=$1 st
  [ -n "$p" ] && [ -r "/proc/$p/stat" ] || return 1
  st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) || return 1
  [ "$st" != Z ]
}

pid_from() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }
nodes_file() { cat "$DIR/nodes" 2>/dev/null || echo 0; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
check_node() {
  [[ ${1:-} =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(nodes_file)" ] \
    || die "no such node '${1:-}' ($(nodes_file) nodes are up)"
}

cmd_install() {
  local t0 prc="" pkgs="openssh-server openssh-client iproute2 procps util-linux"
  t0=$(now_ms)
  # shellcheck disable=SC2086
  if [ "$(dpkg-query -W -f='${Status}\n' $pkgs 2>/dev/null | grep -c 'install ok installed')" \
       -eq "$(wc -w <<< "$pkgs")" ] && [ -x /usr/sbin/sshd ]; then
    log "already installed"; return
  fi
  export DEBIAN_FRONTEND=noninteractive
  # the postinst would start the system's sshd on port 22 where invoke-rc.d can: forbid it for
  # the duration of the install unless a policy already exists
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    prc=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $prc; chmod 755 $prc
  fi
  apt-cache show openssh-server >/dev/null 2>&1 || apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; } \
    || { [ -z "$prc" ] || rm -f $prc; die "apt-get install $pkgs failed"; }
  [ -z "$prc" ] || rm -f $prc
  log "installed in $(( $(now_ms) - t0 )) ms"
}

setup_net() {  # bridge + one namespace per host + hosts/nsswitch files; idempotent
  local n=$1 i ns
  [ -n "$(ip link show $BR 2>/dev/null)" ] \
    || [[ $'\n'$(ip -4 route show) != *$'\n'"$NET.0/24 "* ]] \
    || die "$NET.0/24 is routed here already: set FIBER_SSH_NET"
  { echo "127.0.0.1 localhost"; echo "$NET.1 driver"
    for i in $(seq 1 "$n"); do echo "$NET.$((10 + i)) node$i"; done; } > "$DIR/hosts"
  sed 's/^hosts:.*/hosts:          files/' /etc/nsswitch.conf > "$DIR/nsswitch.conf"
  echo "# the ssh test hosts' own ~/.bashrc (scripts/ssh-nodes.sh): nothing to run" > "$DIR/bashrc"
  ip link show $BR >/dev/null 2>&1 || {
    ip link add $BR type bridge
    # a fixed MAC: a bridge without one takes its lowest port's, and changes it as ports
    # come and go (pods, containers); its hosts' ARP entries then point at nothing for
    # ~30 s, and every connection through it stalls (fiber counts their jobs lost)
    ip link set $BR address "$(printf '02:fb:%02x:%02x:%02x:01' ${NET//./ })"
    ip addr add "$NET.1/24" dev $BR
    ip link set $BR up
  }
  for i in $(seq 1 "$n"); do
    ns=$NS$i
    ip netns list | grep -qw "^$ns" || ip netns add "$ns"
    if ! ip link show "$VETH$i" >/dev/null 2>&1; then
      ip link add "$VETH$i" type veth peer name eth0 netns "$ns"
      ip link set "$VETH$i" master $BR up
      ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
    fi
  done
}

write_conf() {  # sshd config per node + the clients' ssh_config
  local n=$1 i
  : > "$DIR/ssh_config.new"
  for i in $(seq 1 "$n"); do
    cat > "$DIR/sshd-node$i.conf" <<EOF
ListenAddress $NET.$((10 + i))
HostKey $DIR/hostkey
PidFile $DIR/sshd-node$i.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
Subsystem sftp internal-sftp
EOF
    cat >> "$DIR/ssh_config.new" <<EOF
Host node$i
  HostName $NET.$((10 + i))
  User root
  IdentityFile $DIR/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 5
EOF
  done
  mv "$DIR/ssh_config.new" "$DIR/ssh_config"
}

cmd_start() {
  local n=${1:-3} i t0
  t0=$(now_ms)
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "N must be 1..200, got $n"
  [ -x /usr/sbin/sshd ] || cmd_install
  if [ "$(nodes_file)" != 0 ] && [ "$(nodes_file)" != "$n" ]; then
    die "$(nodes_file) nodes exist; stop them first"
  fi
  mkdir -p "$DIR" /run/sshd; chmod 700 "$DIR"   # sshd needs its privilege-separation dir
  echo "$n" > "$DIR/nodes"
  [ -f "$DIR/hostkey" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/hostkey"
  [ -f "$DIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/id_ed25519"
  cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"
  setup_net "$n"
  write_conf "$n"
  for i in $(seq 1 "$n"); do
    alive "$(pid_from "$DIR/sshd-node$i.pid")" && continue
    nsenter --net="/run/netns/$NS$i" -- unshare --uts --mount --propagation private -- \
      sh -c 'mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/nsswitch.conf" /etc/nsswitch.conf &&
        { [ ! -f "$2/.bashrc" ] || mount --bind "$0/bashrc" "$2/.bashrc"; } &&
        hostname "$1" && exec /usr/sbin/sshd -f "$0/sshd-$1.conf"' "$DIR" "node$i" "$HOME"
  done
  for i in $(seq 1 "$n"); do
    local ok=0
    for _ in $(seq 100); do
      if ssh -F "$DIR/ssh_config" "node$i" true 2>/dev/null; then ok=1; break; fi
      sleep 0.1
    done
    [ $ok = 1 ] || die "node$i does not answer over ssh (sshd log: run it with -d by hand)"
  done
  log "$n nodes up in $(( $(now_ms) - t0 )) ms; eval \"\$($0 env)\"; ssh -F \$FIBER_SSH_CONFIG node1 ..."
}

ns_list() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NS[0-9]+\$" || true; }

cmd_stop() {
  local ns p pids=()
  for p in "$DIR"/sshd-node*.pid; do
    [ -e "$p" ] || continue
    p=$(pid_from "$p"); alive "$p" && { kill -TERM "$p" 2>/dev/null || true; pids+=("$p"); }
  done
  for _ in $(seq 20); do
    local any=0; for p in "${pids[@]}"; do alive "$p" && any=1; done
    [ $any = 0 ] && break; sleep 0.1
  done
  # everything still running inside our namespaces (sessions, processes started over ssh)
  for ns in $(ns_list); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  for ns in $(ns_list); do ip netns del "$ns" 2>/dev/null || true; done
  ip link show $BR >/dev/null 2>&1 && ip link del $BR || true
  # the kernel frees a deleted namespace (and its veth) asynchronously: wait, so that an
  # immediate `start` does not find a dying veth and skip creating it
  for _ in $(seq 50); do ip -br link | grep -q "^$VETH" || break; sleep 0.1; done
  rm -f "$DIR"/*.pid "$DIR/nodes"
  log "stopped"
}

cmd_status() {
  local i n p
  n=$(nodes_file)
  [ "$n" -gt 0 ] || { echo "not started"; return; }
  for i in $(seq 1 "$n"); do
    p=$(pid_from "$DIR/sshd-node$i.pid")
    if alive "$p"; then echo "node$i $NET.$((10 + i)) sshd $p up"; else echo "node$i $NET.$((10 + i)) down"; fi
  done
}

cmd_env() {
  local slots=${1:-32} n i hosts=""
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "SLOTS must be a positive number, got $slots"
  n=$(nodes_file)
  [ "$n" -gt 0 ] || die "not started"
  for i in $(seq 1 "$n"); do hosts="$hosts,node$i:$slots"; done
  echo "export FIBER_SSH_HOSTS=${hosts#,} FIBER_SSH_CONFIG=$DIR/ssh_config FIBER_SSH_DRIVER_ADDR=$NET.1 FIBER_SSH_NODES_SH=$(readlink -f "$0")"
}

cmd_smoke() {  # end-to-end checks, exit non-zero on failure
  local n i t0 out C="-F $DIR/ssh_config" port=$((25000 + RANDOM % 1000))
  n=$(nodes_file)
  [ "$n" -gt 0 ] || { echo "not started"; return 1; }
  for i in $(seq 1 "$n"); do
    t0=$(now_ms)
    # shellcheck disable=SC2086
    out=$(ssh $C "node$i" python3 -c "'import socket; print(\"python on\", socket.gethostname())'")
    echo "$out ($(( $(now_ms) - t0 )) ms for one ssh round trip)"
    [ "$out" = "python on node$i" ] || { echo "FAILED"; return 1; }
  done
  python3 -c "
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$NET.1', $port)); s.listen(); s.settimeout(20)
c, a = s.accept(); print('driver got:', c.recv(100).decode(), 'from', a[0])" &
  local drv=$!
  sleep 0.3
  # shellcheck disable=SC2086
  ssh $C "node$n" python3 -c "'import socket; socket.create_connection((\"driver\", $port), timeout=5).sendall(b\"hello from \" + socket.gethostname().encode())'"
  wait $drv || { echo "node -> driver TCP FAILED"; return 1; }
  echo "SMOKE OK"
}

# kill -9 every process of node $1 until none is left: a process that exits between the
# listing and the kill is not an error, one that survives is.
cmd_crash() {
  local pids tries=0
  while pids=$(ip netns pids "$NS$1") && [ -n "$pids" ]; do
    [ "$tries" -lt 50 ] || die "node $1 still has processes: $pids"
    kill -KILL $pids 2>/dev/null || true
    tries=$((tries + 1)); sleep 0.1
  done
}

case "${1:-}" in
  install) cmd_install ;;
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  restart) shift; cmd_stop; cmd_start "$@" ;;
  status) cmd_status ;;
  env) shift; cmd_env "$@" ;;
  smoke) cmd_smoke ;;
  crash) check_node "${2:-}"; cmd_crash "$2" ;;
  partition)
    check_node "${2:-}"
    case "${3:-}" in
      on) ip link set "$VETH$2" down ;;
      off) ip link set "$VETH$2" up ;;
      *) die "partition I on|off" ;;
    esac ;;
  pids) check_node "${2:-}"; ip netns pids "$NS$2" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
