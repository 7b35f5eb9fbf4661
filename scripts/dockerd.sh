#!/usr/bin/env bash
# Starts or stops a private Docker daemon for agentd's tests (no systemd:
# dockerd runs in the background with its own data root, exec root, pid
# file and socket under DIR). No bridge, no iptables: sandboxes run with
# --network none.
#
#   scripts/dockerd.sh start DIR   # prints DOCKER_HOST=unix://DIR/docker.sock
#   scripts/dockerd.sh stop DIR
#
# DIR keeps the data root (images) between runs: a later start finds the
# images built before. Keep DIR short: the exec root holds containerd's
# sockets (108-byte limit).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"

case "$cmd" in
start)
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "DOCKER_HOST=unix://$sock"
    exit 0
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "dockerd not installed (scripts/setup.sh installs docker.io)" >&2
    exit 1
  fi
  mkdir -p "$dir/root" "$dir/exec"
  # --exec-opt native.cgroupdriver=cgroupfs: no systemd here.
  dockerd \
    --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$pidfile" \
    --host "unix://$sock" --bridge none --iptables=false --ip-masq=false --ip6tables=false \
    --exec-opt native.cgroupdriver=cgroupfs --storage-driver overlay2 \
    --log-level warn >"$dir/dockerd.log" 2>&1 &
  started=$(date +%s%N)
  for _ in $(seq 1 600); do
    if [ -S "$sock" ] && DOCKER_HOST="unix://$sock" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
      echo "dockerd up in $(( ($(date +%s%N) - started) / 1000000 )) ms" >&2
      echo "DOCKER_HOST=unix://$sock"
      exit 0
    fi
    if ! kill -0 $! 2>/dev/null; then
      echo "dockerd exited at start:" >&2
      tail -20 "$dir/dockerd.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "dockerd did not answer within 60 s:" >&2
  tail -20 "$dir/dockerd.log" >&2
  exit 1
  ;;
stop)
  if [ ! -f "$pidfile" ]; then
    exit 0
  fi
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    # Containers left by a failed test go first (dockerd would stop them
    # anyway, but then restart none of them next time).
    ids=$(DOCKER_HOST="unix://$sock" docker ps -aq --filter label=agentd.managed 2>/dev/null || true)
    if [ -n "$ids" ]; then
      echo "removing $(echo "$ids" | wc -l) leftover agentd containers" >&2
      DOCKER_HOST="unix://$sock" docker rm -f $ids >/dev/null 2>&1 || true
    fi
    kill "$pid"
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd did not stop in 30 s; killing it" >&2
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
