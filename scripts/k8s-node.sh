#!/usr/bin/env bash
# k8s-node.sh - a real one-node Kubernetes for fiber's kubernetes backend tests. Run as root.
#
# No Kubernetes server binaries exist in the registries this machine reaches, so `build` compiles
# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet from Debian's `kubernetes`
# source package (1.20.5+really1.20.2, the package Debian builds kubectl from; its orig tarball is
# the whole upstream tree with vendor/) with Debian's golang-go. The binaries are cached in
# $CACHE (default ~/.cache/fiber-k8s), outside the repository: a machine builds them once.
#
#   k8s-node.sh build     ~25-30 min on 2 cores the first time; "already built" after
#   k8s-node.sh start     the node (below); needs the images of container-engine.sh
#   k8s-node.sh stop      stop everything started here, delete the namespace. Idempotent.
#   k8s-node.sh env       print `export KUBECONFIG=...` and the node's addresses
#   k8s-node.sh test-env  env, plus namespace fiber-test with deploy/rbac.yaml and the FIBER_*
#                         settings of the test suite (see print_test_env)
#   k8s-node.sh status
#
# Network hygiene (a hard rule): the whole node - etcd, apiserver, controller-manager,
# scheduler, kubelet and a dockerd of its own, hence every pod - runs in the network namespace
# $NS, which has NO default route. It is joined to this machine by one veth pair
# ($HOST_IP <-> $NODE_IP); the host has one route, to the pods' bridge ($POD_NET) via the node.
# Nothing in the namespace can reach anything beyond this machine (a packet to any other address
# fails locally with "network unreachable"); the kubelet also runs with cloud credential lookups
# disabled (AWS_EC2_METADATA_DISABLED) and no cloud provider.
#
# The node: the apiserver listens on $NODE_IP:$PORT (token auth, RBAC, self-signed cert);
# the controller-manager runs the garbage collector (owner references: deleting a master pod
# deletes its workers), namespace and service-account controllers; pods get their service
# account token, and in-cluster clients reach the apiserver at $NODE_IP (KUBERNETES_SERVICE_HOST
# is set to it through a PodPreset-free way: the tests pass it in the pod spec; there is no
# kube-proxy, so the 10.96.0.1 service address is not routed).
#
# Sandbox-specific changes (found by trying, see ../../shared/tools/k8s-node.sh):
#  * kubelet patched: dockershim's sandbox oom_score_adj -998 and Guaranteed-QoS -997 -> 0:
#    lowering oom_score_adj needs CAP_SYS_RESOURCE, which this machine lacks.
#  * the node's not-ready taint is removed by hand (no node lifecycle controller runs).
#  * --cgroups-per-qos=false, no eviction thresholds, images never garbage-collected.
#
# Environment: FIBER_K8S_DIR (state, default /var/tmp/fiber-k8s), FIBER_K8S_CACHE (binaries,
# default ~/.cache/fiber-k8s), FIBER_DOCKER_DIR (container-engine.sh's state: its image tarballs
# are loaded into this node's own dockerd).
set -euo pipefail

DIR=${FIBER_K8S_DIR:-/var/tmp/fiber-k8s}
CACHE=${FIBER_K8S_CACHE:-$HOME/.cache/fiber-k8s}
BIN=$CACHE/bin
NS=fiberk8s
HOST_IF=fk8s0
HOST_IP=10.205.0.1
NODE_IP=10.205.0.2
POD_NET=10.206.0
PORT=6443
REPO=$(cd "$(dirname "$0")/.." && pwd)
SOCK=$DIR/docker/docker.sock
TOKEN=fiber-admin-token
PAUSE=fiber-pause:2
COMPONENTS="kube-apiserver kube-controller-manager kube-scheduler kubelet"
export KUBECONFIG=$DIR/kubeconfig

log() { echo "[k8s-node] $*" >&2; }
die() { echo "[k8s-node] ERROR: $*" >&2; exit 1; }
alive() {
  local st
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 1
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$st" != Z ]
}
running() { alive "$(cat "$DIR/$1.pid" 2>/dev/null || true)"; }
in_ns() { ip netns exec $NS "$@"; }
built() { local c; for c in $COMPONENTS; do [ -x "$BIN/$c" ] || return 1; done; }
# Debian's kubectl (the node's own version), unpacked into $BIN rather than installed: some
# machine images already have a kubectl package owning /usr/bin/kubectl (gcloud's), which
# Debian's kubernetes-client cannot be installed over
kubectl() { "$BIN/kubectl" "$@"; }
fetch_kubectl() {
  [ -x "$BIN/kubectl" ] && return
  local tmp; tmp=$(mktemp -d)
  ( cd "$tmp" && { apt-get download kubernetes-client >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get download kubernetes-client >/dev/null; }; } ) \
    || { rm -rf "$tmp"; die "cannot download Debian's kubernetes-client (kubectl)"; }
  dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$tmp/x"
  mkdir -p "$BIN"
  install -m 755 "$tmp/x/usr/bin/kubectl" "$BIN/kubectl"
  rm -rf "$tmp"
}

build() {
  if built; then log "already built ($BIN)"; return; fi
  local t0 src apt_o uri
  t0=$(date +%s)
  export DEBIAN_FRONTEND=noninteractive
  command -v go >/dev/null && command -v rsync >/dev/null || {
    apt-get update -qq; apt-get install -y -qq --no-install-recommends golang-go rsync >/dev/null; }
  src=${FIBER_K8S_BUILD_DIR:-/var/tmp/fiber-k8s-build}
  rm -rf "$src"; mkdir -p "$src/lists/partial"
  # deb-src entries in a private list: /etc/apt is left untouched
  uri=$(grep -hm1 '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -1)
  echo "deb-src ${uri:-http://deb.debian.org/debian} bookworm main" > "$src/src.list"
  apt_o="-o Dir::Etc::SourceList=$src/src.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$src/lists"
  # shellcheck disable=SC2086
  apt-get $apt_o update -qq
  # shellcheck disable=SC2086
  (cd "$src" && apt-get $apt_o source --download-only kubernetes >/dev/null)
  mkdir -p "$src/k"
  tar xzf "$src"/kubernetes_*.orig.tar.gz -C "$src/k" --strip-components=1
  cd "$src/k"
  sed -i 's/defaultSandboxOOMAdj int = -998/defaultSandboxOOMAdj int = 0/' pkg/kubelet/dockershim/docker_sandbox.go
  sed -i 's/guaranteedOOMScoreAdj int = -997/guaranteedOOMScoreAdj int = 0/' pkg/kubelet/qos/policy.go
  grep -q 'defaultSandboxOOMAdj int = 0' pkg/kubelet/dockershim/docker_sandbox.go || die "sandbox patch did not apply"
  grep -q 'guaranteedOOMScoreAdj int = 0' pkg/kubelet/qos/policy.go || die "QoS patch did not apply"
  mkdir -p .go/src/k8s.io
  [ -L .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
  # the invocation Debian's debian/rules uses for kubectl; GOPROXY=off: everything is vendored
  env GOPATH="$PWD/.go" CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor HOME="$src/gohome" \
    GOCACHE="$src/gocache" make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet"
  mkdir -p "$BIN"
  for c in $COMPONENTS; do cp "_output/bin/$c" "$BIN/$c.tmp"; mv "$BIN/$c.tmp" "$BIN/$c"; done
  cd /; rm -rf "$src"
  log "built in $(( $(date +%s) - t0 )) s: $BIN"
}


# -- the network namespace --------------------------------------------------------------------

netns_up() {
  if ! ip netns list | grep -qw "$NS"; then ip netns add $NS; fi
  in_ns ip link set lo up
  if ! ip link show $HOST_IF >/dev/null 2>&1; then
    ip link add $HOST_IF type veth peer name eth0 netns $NS
  fi
  ip addr replace $HOST_IP/24 dev $HOST_IF
  ip link set $HOST_IF up
  in_ns ip addr replace $NODE_IP/24 dev eth0
  in_ns ip link set eth0 up
  # the pods' bridge lives in the namespace; the host reaches it through the node, and the node
  # forwards between its two links (a per-namespace setting: the host's own is untouched)
  ip route replace $POD_NET.0/24 via $NODE_IP dev $HOST_IF
  in_ns sysctl -qw net.ipv4.ip_forward=1
  if in_ns ip route show default | grep -q .; then die "namespace $NS has a default route"; fi
}

netns_down() {
  ip route del $POD_NET.0/24 2>/dev/null || true
  ip link del $HOST_IF 2>/dev/null || true
  ip netns del $NS 2>/dev/null || true
}

# -- certificates and credentials -------------------------------------------------------------

credentials() {
  cd "$DIR"
  [ -f sa.key ] || { openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
  if [ ! -f ca.crt ] || [ ! -f apiserver.crt ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj /CN=fiber-test-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj /CN=kube-apiserver 2>/dev/null
    printf 'subjectAltName=IP:%s,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' \
      "$NODE_IP" > san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out apiserver.crt -days 3650 -extfile san.ext 2>/dev/null
  fi
  echo "$TOKEN,admin,admin,system:masters" > tokens.csv
  cat > kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fiber-test
  cluster: {server: "https://$NODE_IP:$PORT", certificate-authority: "$DIR/ca.crt"}
users:
- name: admin
  user: {token: "$TOKEN"}
contexts:
- name: fiber-test
  context: {cluster: fiber-test, user: admin}
current-context: fiber-test
EOF
}

# -- the node ---------------------------------------------------------------------------------

# launch NAME CMD...: start a component in the namespace (log in $DIR/NAME.log) unless it runs
launch() {
  local name=$1; shift
  running "$name" && return
  nsenter --net=/run/netns/$NS setsid "$@" > "$DIR/$name.log" 2>&1 < /dev/null &
  echo $! > "$DIR/$name.pid"
}

wait_for() {  # wait_for WHAT SECONDS CMD...
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what not ready within $secs s (logs: $DIR/*.log)"
    sleep 0.3
  done
}

engine() { DOCKER_HOST=unix://$SOCK /usr/bin/docker "$@"; }
engine_script() {
  env FIBER_DOCKER_DIR="$DIR/docker" FIBER_DOCKER_NET=$POD_NET FIBER_DOCKER_BRIDGE=fk8sbr0 \
    FIBER_DOCKER_CACHE="${FIBER_DOCKER_DIR:-/var/tmp/fiber-docker}" "$@"
}

start() {
  [ "$(id -u)" = 0 ] || die "start needs root"
  built || die "Kubernetes binaries missing in $BIN: run '$0 build' first"
  local t0; t0=$(date +%s)
  command -v etcd >/dev/null && command -v openssl >/dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends etcd-server openssl >/dev/null; }
  fetch_kubectl
  mkdir -p "$DIR"
  netns_up
  credentials
  # the node's own Docker engine, in the namespace, on the pods' bridge; its images are built
  # from the same debootstrap tarball and wheels as container-engine.sh's (a shared cache)
  engine_script "$REPO/scripts/container-engine.sh" install
  engine_script nsenter --net=/run/netns/$NS "$REPO/scripts/container-engine.sh" start
  engine_script "$REPO/scripts/container-engine.sh" image
  # The pod sandbox ("pause") image, built here (no registry): its PID 1 must end on SIGTERM
  # (a bare `sleep` as PID 1 ignores it, and every pod deletion would wait the sandbox's
  # 10 s grace) and reap orphans, which a shell's `wait` does.
  engine image inspect $PAUSE >/dev/null 2>&1 || {
    mkdir -p "$DIR/pause"
    printf '%s\n' 'FROM fiber-base:bookworm' \
      "CMD [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM INT; while :; do sleep 86400 & wait \$!; done\"]" \
      > "$DIR/pause/Dockerfile"
    DOCKER_BUILDKIT=0 engine build -q --network none -t $PAUSE "$DIR/pause" >/dev/null; }
  launch etcd etcd --name node --data-dir "$DIR/etcd-data" \
    --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
    --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
    --initial-cluster node=http://127.0.0.1:12380
  launch apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:12379 \
    --bind-address=$NODE_IP --advertise-address=$NODE_IP --secure-port=$PORT --insecure-port=0 \
    --tls-cert-file="$DIR/apiserver.crt" --tls-private-key-file="$DIR/apiserver.key" \
    --client-ca-file="$DIR/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$DIR/sa.pub" \
    --service-account-signing-key-file="$DIR/sa.key" --token-auth-file="$DIR/tokens.csv" \
    --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/24 \
    --kubelet-preferred-address-types=InternalIP
  wait_for apiserver 120 kubectl get --raw /readyz
  launch controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
    --leader-elect=false --port=0 --secure-port=0 \
    --controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token \
    --service-account-private-key-file="$DIR/sa.key" --root-ca-file="$DIR/ca.crt" \
    --use-service-account-credentials=false
  launch scheduler "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG" --leader-elect=false \
    --port=0 --secure-port=0
  mkdir -p "$DIR/kl"
  launch kubelet env AWS_EC2_METADATA_DISABLED=true "$BIN/kubelet" --kubeconfig="$KUBECONFIG" \
    --container-runtime=docker --docker-endpoint=unix://$SOCK --cgroup-driver=cgroupfs \
    --fail-swap-on=false --root-dir="$DIR/kl" --cert-dir="$DIR/kl/pki" --hostname-override=node1 \
    --node-ip=$NODE_IP --address=$NODE_IP --pod-infra-container-image=$PAUSE \
    --cgroups-per-qos=false --enforce-node-allocatable= --read-only-port=0 --healthz-port=0 \
    --eviction-hard= --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --cloud-provider= --max-pods=60
  wait_for "node registration" 120 kubectl get node node1
  kubectl taint nodes node1 node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  wait_for "node readiness" 120 kubectl wait --for=condition=Ready node/node1 --timeout=5s
  kubectl taint nodes node1 node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  wait_for "the default service account" 60 kubectl -n default get serviceaccount default
  log "up in $(( $(date +%s) - t0 )) s: export KUBECONFIG=$KUBECONFIG (apiserver https://$NODE_IP:$PORT)"
}

stop() {
  local c p
  if running apiserver; then
    kubectl delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  fi
  for c in kubelet scheduler controller-manager apiserver etcd; do
    p=$(cat "$DIR/$c.pid" 2>/dev/null || true)
    if alive "$p"; then
      kill "$p"; for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
      if alive "$p"; then kill -KILL "$p"; fi   # the apiserver can hang in graceful shutdown
    fi
    rm -f "$DIR/$c.pid"
  done
  if [ -S "$SOCK" ]; then
    engine ps -aq --filter name=k8s_ | while read -r c; do engine rm -f "$c" >/dev/null 2>&1 || true; done
  fi
  # the kubelet's volume mounts (secrets are tmpfs), then the engine
  awk -v d="$DIR/kl" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  if ip netns list | grep -qw "$NS"; then
    engine_script nsenter --net=/run/netns/$NS "$REPO/scripts/container-engine.sh" stop 2>/dev/null || true
  fi
  netns_down
  rm -rf "$DIR/etcd-data" "$DIR/kl"
  log "stopped"
}

print_env() {
  echo "export KUBECONFIG=$KUBECONFIG"
  echo "export FIBER_K8S_NODE_IP=$NODE_IP FIBER_K8S_HOST_IP=$HOST_IP FIBER_K8S_API=$NODE_IP:$PORT"
  echo "export FIBER_K8S_DOCKER_HOST=unix://$SOCK"
}

# the namespace fiber-test with deploy/rbac.yaml applied, and the FIBER_* settings with which the
# API suite (`pytest --pyargs fiber.testing.conformance --fiber-backend kubernetes`) and
# tests/backends/kubernetes run: image fiber-test:latest (never pulled), tiny CPU requests
# without limits (the API suite starts dozens of pods on 2 cores), the repo's tests/ and
# examples/ directories and TMPDIR mounted into every pod at their own paths (children import
# test and example modules by the master's sys.path: test_kubernetes, es_bipedal; the suite's
# own modules and helpers come with the image's fiber; tests share files through tmp_path),
# the service account of deploy/rbac.yaml (processes in pods start their own children with no
# more rights than it grants) and the apiserver's address for them (there is no kube-proxy, so
# the cluster's service address is not routed).
print_test_env() {
  kubectl get namespace fiber-test >/dev/null 2>&1 || kubectl create namespace fiber-test >/dev/null
  kubectl apply -n fiber-test -f "$REPO/deploy/rbac.yaml" >/dev/null
  wait_for "the fiber service account's token" 60 sh -c \
    "'$BIN/kubectl' -n fiber-test get serviceaccount fiber -o jsonpath='{.secrets[0].name}' | grep -q ."
  mkdir -p "$DIR/tmp"; chmod 1777 "$DIR/tmp"
  print_env
  echo "export TMPDIR=$DIR/tmp"
  echo "export FIBER_IMAGE=fiber-test:latest FIBER_KUBERNETES_IMAGE_PULL_POLICY=IfNotPresent"
  echo "export FIBER_KUBERNETES_NAMESPACE=fiber-test FIBER_KUBERNETES_SERVICE_ACCOUNT=fiber"
  echo "export FIBER_CPU_PER_JOB=0.05 FIBER_KUBERNETES_CPU_LIMITS=false"
  echo "export FIBER_KUBERNETES_POD_API_SERVER=$NODE_IP:$PORT"
  echo "export FIBER_KUBERNETES_MOUNTS=$REPO/tests:$REPO/tests:ro,$REPO/examples:$REPO/examples:ro,$DIR/tmp:$DIR/tmp:rw"
}

status() {
  if running apiserver && kubectl get --raw /readyz >/dev/null 2>&1; then
    echo "kubernetes: up (https://$NODE_IP:$PORT)"
    kubectl get nodes --no-headers 2>/dev/null || true
    kubectl get pods --all-namespaces -l fiber.program --no-headers 2>/dev/null || true
  else
    echo "kubernetes: down"
  fi
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  env) print_env ;;
  test-env) print_test_env ;;
  status) status ;;
  *) sed -n '2,40p' "$0"; exit 2 ;;
esac
