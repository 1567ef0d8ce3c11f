#!/usr/bin/env bash
# container-engine.sh - a private Docker engine on this machine, for fiber's Docker backend tests.
# Run as root. Nothing is pulled from a container registry: the base image is built by debootstrap
# from the Debian mirror apt already uses, and Python packages come from pip (the host's cache).
#
#   container-engine.sh install    apt-get install docker.io debootstrap (apt-get update only when
#                                  a package is missing); < 1 s when both are installed
#   container-engine.sh start      Debian's dockerd on unix://$DIR/docker.sock with its own data
#                                  root, exec root and bridge ($BRIDGE, $NET.1/24); waits until it
#                                  answers. Idempotent: an engine started here and alive is kept.
#   container-engine.sh image      fiber-base:bookworm (debootstrap minbase + python3-venv, then
#                                  `docker import`; skipped when the engine has it), then
#                                  fiber-test:latest: this checkout, numpy, cloudpickle, psutil,
#                                  cryptography, pytest, docker, kubernetes, and gymnasium,
#                                  box2d, pygame-ce
#                                  (examples/es_bipedal.py's workers; $PACKAGES, pinned by
#                                  requirements/constraints.txt) in a venv at /opt/fiber, first on
#                                  PATH (`python3` is that venv's). Built with --network none from
#                                  wheels made on the host; layers are cached.
#   container-engine.sh stop       remove running containers, stop the dockerd started here, unmount
#                                  what it left under $DIR, delete the bridge. Idempotent.
#   container-engine.sh env        print `export DOCKER_HOST=unix://$DIR/docker.sock`
#   container-engine.sh test-env   env, plus the FIBER_* settings and TMPDIR with which the API
#                                  suite (`pytest --pyargs fiber.testing.conformance
#                                  --fiber-backend docker`) and tests/backends/docker run:
#                                  image fiber-test:latest, host networking, the host's PID
#                                  namespace (docker_pid_host), the repo's tests/ and examples/
#                                  directories mounted read-only at their own paths (children
#                                  import test and example modules by the master's sys.path:
#                                  test_docker, es_bipedal; the suite's own modules and helpers
#                                  come with the image's fiber) and TMPDIR mounted
#                                  read-write at its own path (tests share files through tmp_path),
#                                  and the engine's socket (processes in containers start their
#                                  own children: a manager's pool)
#   container-engine.sh status     engine, images, fiber containers
#
# The host is left as it was: dockerd runs with --iptables=false --ip-masq=false --ip-forward=false
# (no firewall rule, no sysctl changed; containers on the bridge reach the host at $NET.1 and
# nothing beyond it) and on its own bridge, so it never meets another engine's docker0.
# State and caches live in $DIR (default /var/tmp/fiber-docker), outside the repo, so a second
# run on the same machine starts in seconds: the engine's data root keeps both images, and the
# debootstrap tarball and the wheels are cached next to it.
#
# Pitfalls met on the way:
# - dockerd leaves an nsfs mount under its exec root after it stops (overlays too when killed
#   hard): `stop` unmounts everything under $DIR before anything is deleted.
# - /usr/local/bin/docker may be another (newer) CLI whose `docker build` wants BuildKit/buildx:
#   this script uses Debian's /usr/bin/docker with DOCKER_BUILDKIT=0.
# - A process that is PID 1 in its container ignores SIGTERM: fiber's containers run with
#   --init (docker-init, i.e. tini, from the docker.io package), which forwards signals.
# - Children unpickle functions defined by value (cloudpickle) only with the master's Python
#   minor version: bookworm's python3 is 3.11, so the master must run 3.11 as well (`image`
#   warns otherwise).
#
# Environment: FIBER_DOCKER_DIR (state, default /var/tmp/fiber-docker), FIBER_DOCKER_NET (first
# three octets of the bridge's /24, default 10.203.0), FIBER_DOCKER_BRIDGE (default fbdock0),
# FIBER_DOCKER_CACHE (debootstrap tarball and wheels, default $FIBER_DOCKER_DIR),
# FIBER_DOCKER_START_TIMEOUT (s, default 60), PYTHON (interpreter that builds the wheels;
# default: the repo's .venv, else python3). Only processes this script started are signalled.
set -euo pipefail

DIR=${FIBER_DOCKER_DIR:-/var/tmp/fiber-docker}
NET=${FIBER_DOCKER_NET:-10.203.0}
BRIDGE=${FIBER_DOCKER_BRIDGE:-fbdock0}
START_TIMEOUT=${FIBER_DOCKER_START_TIMEOUT:-60}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SOCK=$DIR/docker.sock
# images' build inputs (debootstrap tarball, wheels): shareable between engines
CACHE=${FIBER_DOCKER_CACHE:-$DIR}
BASE_IMAGE=fiber-base:bookworm
TEST_IMAGE=fiber-test:latest
DOCKER=/usr/bin/docker
# What fiber-test's jobs import besides fiber (with its conformance suite, whose test modules
# and helpers the jobs of the API suite import): fiber's dependencies, pytest (test modules
# import it), the clients of the docker and kubernetes backends (a job starts its own
# children), and what examples/es_bipedal.py's workers import for the suite's
# test_es_example.py: gymnasium, the box2d wheel, and pygame-ce (gymnasium's box2d package
# imports it even without rendering).
# Not torch (~700 MB): the torch tests are deselected on the container backends.
# cryptography: a main program run in a container (fiber run -b docker) makes the
# program's TLS authority (tls = auto, its jobs on other hosts), as pip install
# fiber-cluster brings it.
PACKAGES="numpy cloudpickle psutil pytest docker kubernetes gymnasium box2d pygame-ce cryptography"
export DOCKER_HOST=unix://$SOCK DOCKER_BUILDKIT=0

log() { echo "[container-engine] $*" >&2; }
die() { echo "[container-engine] ERROR: $*" >&2; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
T0=$(now_ms)
took() { local t; t=$(now_ms); log "$1: $(( (t - T0) / 1000 )).$(( (t - T0) % 1000 / 100 )) s"; }

# alive PID: running and not a zombie (PID 1 here may reap late)
alive() {
  local st
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 1
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$st" != Z ]
}
# pip, less the warnings of find-links locations of this machine's pip config that don't exist
pip_quiet() {
  "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' >&2 || true; }
  return "${PIPESTATUS[0]}"
}
dockerd_pid() { cat "$DIR/dockerd.pid" 2>/dev/null || true; }
answers() { timeout 10 "$DOCKER" version >/dev/null 2>&1; }
need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root"; }

install() {
  need_root install
  local missing=()
  command -v dockerd >/dev/null 2>&1 && [ -x "$DOCKER" ] || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    log "installing ${missing[*]}"
    # docker.io's maintainer scripts would start the system's dockerd (default socket, with
    # iptables rules): a policy-rc.d that forbids starting services, for this install only
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
    fi
    local rc=0
    { apt-get update -qq \
      && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || rc=$?
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
    [ "$rc" = 0 ] || die "apt-get install ${missing[*]} failed"
    # docker.io brings containerd, runc and tini (docker-init)
  fi
  command -v dockerd >/dev/null && [ -x "$DOCKER" ] || die "docker.io did not install dockerd/docker"
  took install
}

make_bridge() {
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip -4 addr show dev "$BRIDGE" | grep -q "inet $NET.1/" \
      || die "bridge $BRIDGE exists without $NET.1/24 (set FIBER_DOCKER_BRIDGE/FIBER_DOCKER_NET)"
  else
    if ip -4 route show "$NET.0/24" | grep -q .; then
      die "$NET.0/24 is already routed here (set FIBER_DOCKER_NET to a free /24)"
    fi
    ip link add "$BRIDGE" type bridge
    # a fixed MAC: a bridge without one takes its lowest port's, and changes it as ports
    # come and go (pods, containers); its hosts' ARP entries then point at nothing for
    # ~30 s, and every connection through it stalls (fiber counts their jobs lost)
    ip link set "$BRIDGE" address "$(printf '02:fb:%02x:%02x:%02x:01' ${NET//./ })"
    ip addr add "$NET.1/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
}

start() {
  need_root start
  command -v dockerd >/dev/null 2>&1 || die "dockerd is not installed: run '$0 install'"
  mkdir -p "$DIR"
  local pid
  pid=$(dockerd_pid)
  if alive "$pid" && answers; then
    log "dockerd already running (pid $pid) on $DOCKER_HOST"
    took start
    return
  fi
  if alive "$pid"; then
    die "dockerd (pid $pid) runs but does not answer on $DOCKER_HOST: run '$0 stop' first"
  fi
  rm -f "$SOCK" "$DIR/dockerd.pid"
  make_bridge
  # --iptables/--ip-masq/--ip-forward=false: no firewall rule, no NAT, no sysctl is changed.
  setsid dockerd --data-root "$DIR/data" --exec-root "$DIR/exec" -H "unix://$SOCK" \
    --pidfile "$DIR/dockerd.pid" --bridge "$BRIDGE" \
    --iptables=false --ip-masq=false --ip-forward=false --userland-proxy=false \
    --log-opt max-size=10m --log-opt max-file=2 \
    > "$DIR/dockerd.log" 2>&1 < /dev/null &
  local launched=$! deadline=$(( $(date +%s) + START_TIMEOUT ))
  until answers; do
    if ! alive "$launched"; then
      tail -20 "$DIR/dockerd.log" >&2 || true
      die "dockerd exited during start (log: $DIR/dockerd.log)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail -20 "$DIR/dockerd.log" >&2 || true
      die "dockerd did not answer within $START_TIMEOUT s (log: $DIR/dockerd.log); run '$0 stop'"
    fi
    sleep 0.2
  done
  log "dockerd $("$DOCKER" version -f '{{.Server.Version}}') up (pid $(dockerd_pid)) on $DOCKER_HOST"
  took start
}

debian_mirror() {
  local mirror
  mirror=$(grep -hm1 '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
    | head -1 || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${mirror:-http://deb.debian.org/debian}"
}

base_image() {
  if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "$BASE_IMAGE: present (cached)"
    return
  fi
  local tar=$CACHE/cache/rootfs-bookworm.tar
  mkdir -p "$CACHE/cache"
  if [ ! -s "$tar" ]; then
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed: run '$0 install'"
    local root=$CACHE/cache/rootfs mirror
    mirror=$(debian_mirror)
    log "debootstrap bookworm (minbase + python3-venv) from $mirror"
    rm -rf "$root"
    if ! debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$mirror" \
        > "$CACHE/cache/debootstrap.log" 2>&1; then
      tail -20 "$CACHE/cache/debootstrap.log" >&2 || true
      die "debootstrap failed (log: $CACHE/cache/debootstrap.log)"
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tar.part" . && mv "$tar.part" "$tar"
    rm -rf "$root"
  fi
  "$DOCKER" import "$tar" "$BASE_IMAGE" >/dev/null
  log "$BASE_IMAGE: imported"
}

wheels() {
  # Wheels of the image's packages, made by the host's pip (its cache makes a repeat fast);
  # skipped when the constraints and the list are those of the wheels already made.
  local py=$1 deps=$CACHE/build/deps stamp want=$PACKAGES
  stamp=$( (cat "$REPO/requirements/constraints.txt"; echo "$want"; "$py" -c 'import sys; print(sys.version_info[:2])') \
    | sha256sum | cut -c1-16)
  if [ "$(cat "$deps/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
    rm -rf "$deps"; mkdir -p "$deps"
    # shellcheck disable=SC2086
    pip_quiet "$py" -m pip wheel -q --disable-pip-version-check -c "$REPO/requirements/constraints.txt" \
      --wheel-dir "$deps" $want
    echo "$stamp" > "$deps/.stamp"
  fi
  # fiber's own wheel: rebuilt only when its sources changed (a build costs ~6 s)
  stamp=$( (cd "$REPO" && find src -path '*/__pycache__' -prune -o -type f -print | LC_ALL=C sort \
    | xargs sha256sum && sha256sum pyproject.toml README.md) | sha256sum | cut -c1-16)
  if [ "$(cat "$CACHE/build/fiber/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
    rm -rf "$CACHE/build/fiber"; mkdir -p "$CACHE/build/fiber"
    pip_quiet "$py" -m pip wheel -q --disable-pip-version-check --no-deps \
      --wheel-dir "$CACHE/build/fiber" "$REPO"
    echo "$stamp" > "$CACHE/build/fiber/.stamp"
  fi
}

test_image() {
  local py=${PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then py=$REPO/.venv/bin/python; else py=python3; fi
  fi
  wheels "$py"
  # the imports checked: the box2d wheel's compiled module must load on bookworm, and
  # gymnasium's box2d package needs pygame (as BipedalWalker-v3 does)
  cat > "$CACHE/build/Dockerfile" <<'EOF'
FROM fiber-base:bookworm
ARG PACKAGES
COPY deps/ /tmp/deps/
RUN python3 -m venv /opt/fiber \
 && /opt/fiber/bin/pip install -q --no-index --no-cache-dir --disable-pip-version-check \
      --find-links /tmp/deps $PACKAGES \
 && rm -rf /tmp/deps \
 && /opt/fiber/bin/python -c "import Box2D, gymnasium.envs.box2d"
COPY fiber/ /tmp/fiber/
RUN /opt/fiber/bin/pip install -q --no-index --no-cache-dir --disable-pip-version-check \
      --no-deps /tmp/fiber/*.whl \
 && rm -rf /tmp/fiber \
 && /opt/fiber/bin/python -c "import fiber, numpy, cloudpickle, psutil, cryptography"
ENV PATH=/opt/fiber/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EOF
  "$DOCKER" build -q --network none --build-arg PACKAGES="$PACKAGES" -t "$TEST_IMAGE" \
    "$CACHE/build" >/dev/null
  "$DOCKER" image prune -f >/dev/null 2>&1 || true   # the previous fiber-test layers
  log "$TEST_IMAGE: built ($("$DOCKER" image inspect -f '{{.Id}}' "$TEST_IMAGE" | cut -c8-19))"
  local host_v image_v
  host_v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  image_v=$("$DOCKER" run --rm --network none "$TEST_IMAGE" python3 -c \
    'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$host_v" != "$image_v" ]; then
    log "WARNING: the master's Python is $host_v, the image's $image_v: functions sent by value" \
        "(lambdas, __main__) cannot run in the containers"
  fi
}

image() {
  answers || die "the engine does not answer on $DOCKER_HOST: run '$0 start'"
  base_image
  took "image $BASE_IMAGE"
  test_image
  took "image $TEST_IMAGE"
}

stop() {
  local pid p
  pid=$(dockerd_pid)
  if alive "$pid"; then
    if answers; then
      "$DOCKER" ps -q | xargs -r "$DOCKER" rm -f >/dev/null 2>&1 || true
    fi
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      log "dockerd (pid $pid) ignores SIGTERM: SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  # what a hard-killed dockerd leaves: its containerd and shims (started for this exec root)
  p=$(cat "$DIR/exec/containerd/containerd.pid" 2>/dev/null || true)
  if alive "$p" && tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "$DIR/"; then
    kill "$p" 2>/dev/null || true
  fi
  for p in $(pgrep -f "containerd-shim.* -address $DIR/exec/" || true); do
    kill -9 "$p" 2>/dev/null || true
  done
  rm -f "$DIR/dockerd.pid" "$SOCK"
  # dockerd leaves its nsfs mount <exec-root>/netns/default (and overlays if killed hard)
  if [ -d "$DIR" ]; then
    awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || true; fi
  took stop
}

print_env() { echo "export DOCKER_HOST=unix://$SOCK"; }

print_test_env() {
  mkdir -p "$DIR/tmp"
  chmod 1777 "$DIR/tmp"
  print_env
  # docker_pid_host: Process.pid is a pid of this host, that of the job's first process
  # (its output relay, which passes signals on to the job): os.kill(p.pid) reaches the job
  echo "export FIBER_IMAGE=$TEST_IMAGE FIBER_DOCKER_NETWORK=host FIBER_DOCKER_PID_HOST=true"
  echo "export TMPDIR=$DIR/tmp"
  # the engine's socket too, and docker_host: fiber processes in the containers (a manager's
  # pool) start their own children on the same engine
  echo "export FIBER_DOCKER_HOST=unix://$SOCK"
  echo "export FIBER_DOCKER_MOUNTS=$REPO/tests:$REPO/tests:ro,$REPO/examples:$REPO/examples:ro,$DIR/tmp:$DIR/tmp:rw,$SOCK:$SOCK:rw"
}

status() {
  local pid
  pid=$(dockerd_pid)
  if alive "$pid" && answers; then
    echo "dockerd: up (pid $pid) on $DOCKER_HOST"
    "$DOCKER" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^fiber-' || true
    "$DOCKER" ps -a --filter label=fiber.program \
      --format '{{.Names}} {{.Status}} {{.Label "fiber.name"}}' || true
  else
    echo "dockerd: down"
  fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  image) image ;;
  stop) stop ;;
  env) print_env ;;
  test-env) print_test_env ;;
  status) status ;;
  *) sed -n '2,33p' "$0"; exit 2 ;;
esac
