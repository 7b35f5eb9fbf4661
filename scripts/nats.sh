#!/usr/bin/env bash
# Starts or stops the NATS server the fleet tests and benchmarks use, from
# Debian's nats-server package (installed by scripts/setup.sh).
#
#   eval "$(scripts/nats.sh start)"   # prints export AGENTD_TEST_NATS=nats://127.0.0.1:PORT
#   scripts/nats.sh stop
#
# The server listens on a free loopback port only, keeps nothing on disk
# (no JetStream) and writes its log into a temporary folder recorded in
# $NATSSTATE (default /tmp/agentd-test-nats.state). Go tests that find no
# AGENTD_TEST_NATS start a private server the same way where they can
# (internal/bus/natstest).
set -euo pipefail
# shellcheck source=terminate.sh
. "$(dirname "${BASH_SOURCE[0]}")/terminate.sh"

state=${NATSSTATE:-/tmp/agentd-test-nats.state}

binary() {
  local b
  for b in "$(command -v nats-server 2>/dev/null || true)" /usr/sbin/nats-server /usr/local/bin/nats-server; do
    if [ -n "$b" ] && [ -x "$b" ]; then
      echo "$b"
      return
    fi
  done
  echo "nats.sh: nats-server not found (install it: scripts/setup.sh)" >&2
  exit 1
}

start() {
  if [ -f "$state" ]; then
    echo "nats.sh: a server is already recorded in $state; run scripts/nats.sh stop first" >&2
    exit 1
  fi
  local bin dir pid url=""
  bin=$(binary)
  dir=$(mktemp -d /tmp/agentd-test-nats.XXXXXX)
  mkdir "$dir/ports"
  # setsid: the server outlives this script's process group (CI steps).
  # NATSLISTEN=ADDR listens there instead of on loopback: for pods of the
  # test cluster (an address inside its network namespace; run this
  # script there), never a host address.
  setsid "$bin" -a "${NATSLISTEN:-127.0.0.1}" -p -1 --ports_file_dir "$dir/ports" -l "$dir/server.log" </dev/null >/dev/null 2>&1 &
  pid=$!
  echo "$dir $pid" > "$state"
  for _ in $(seq 1 200); do
    if [ -f "$dir/ports/$(basename "$bin")_$pid.ports" ]; then
      url=$(sed -n 's/.*"nats":\["\([^"]*\)".*/\1/p' "$dir/ports/$(basename "$bin")_$pid.ports")
      [ -n "$url" ] && break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$dir/server.log" >&2 || true
      rm -rf "$dir" "$state"
      echo "nats.sh: nats-server exited at start" >&2
      exit 1
    fi
    sleep 0.05
  done
  if [ -z "$url" ]; then
    echo "nats.sh: nats-server did not start in 10s" >&2
    stop
    exit 1
  fi
  echo "export AGENTD_TEST_NATS='$url'"
}

stop() {
  [ -f "$state" ] || return 0
  local dir pid
  read -r dir pid < "$state"
  terminate "$pid" 100
  rm -rf "$dir" "$state"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/nats.sh start|stop" >&2; exit 2 ;;
esac
