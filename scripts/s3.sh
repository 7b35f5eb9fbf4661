#!/usr/bin/env bash
# Starts or stops the S3-compatible server the artifact tests use: a
# SeaweedFS server (master, volume, filer and S3 gateway in one process)
# built from the module pinned in tools/seaweedfs (scripts/s3-build.sh,
# run by scripts/setup.sh; cached per version).
#
#   eval "$(scripts/s3.sh start)"   # prints the exports below
#   scripts/s3.sh stop
#
# start prints AGENTD_TEST_S3 (s3://agentd-test?endpoint=http://127.0.0.1:PORT,
# a bucket created empty) and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (a
# key pair made for this server). The server listens on loopback ports
# only and keeps its data and log in a temporary folder recorded in
# $S3STATE (default /tmp/agentd-test-s3.state), removed by stop. Go tests
# that find no AGENTD_TEST_S3 skip (store/s3blobs/s3test).
set -euo pipefail
# shellcheck source=terminate.sh
. "$(dirname "${BASH_SOURCE[0]}")/terminate.sh"

state=${S3STATE:-/tmp/agentd-test-s3.state}
bucket=agentd-test

# free_port prints a loopback port nothing listens on, below Linux's
# ephemeral range (32768 up by default), whose ports outgoing connections
# take without listening (the server may still lose it: start retries).
free_port() {
  local p
  while :; do
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

start() {
  if [ -f "$state" ]; then
    echo "s3.sh: a server is already recorded in $state; run scripts/s3.sh stop first" >&2
    exit 1
  fi
  local bin dir pid key secret attempt
  bin=$("$(dirname "$0")/s3-build.sh" | tail -1)
  dir=$(mktemp -d /tmp/agentd-test-s3.XXXXXX)
  mkdir "$dir/data"
  key=agentd$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
  secret=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
  printf '{"identities":[{"name":"agentd","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}\n' \
    "$key" "$secret" > "$dir/s3.json"
  chmod 600 "$dir/s3.json"
  for attempt in 1 2 3; do
    local ports=() i
    for i in 1 2 3 4 5 6 7 8; do ports+=("$(free_port)"); done
    local s3port=${ports[6]}
    # setsid: the server outlives this script's process group (CI steps).
    # Volumes (not preallocated) of up to 1 GiB, at most 32: the default 8
    # of the size given ran out in a benchmark (the space of deleted
    # objects comes back only when the master vacuums a volume).
    setsid "$bin" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$dir/data" \
      -master.port="${ports[0]}" -master.port.grpc="${ports[1]}" -master.volumeSizeLimitMB=1024 \
      -volume.port="${ports[2]}" -volume.port.grpc="${ports[3]}" -volume.max=32 \
      -filer -filer.port="${ports[4]}" -filer.port.grpc="${ports[5]}" -filer.localSocket="$dir/filer.sock" \
      -s3 -s3.port="$s3port" -s3.port.grpc="${ports[7]}" -s3.port.iceberg=0 -s3.port.lance=0 \
      -s3.localSocket="$dir/s3.sock" -s3.config="$dir/s3.json" </dev/null >"$dir/server.log" 2>&1 &
    pid=$!
    echo "$dir $pid" > "$state"
    # Its gRPC services also listen on /tmp/seaweedfs-<service>-grpc-<port>.sock
    # (a path it does not let us choose): stop removes them.
    echo "${ports[1]} ${ports[3]} ${ports[5]} ${ports[7]}" > "$dir/grpc-ports"
    for _ in $(seq 1 600); do
      kill -0 "$pid" 2>/dev/null || break
      # The bucket's creation is the readiness check: it needs the S3
      # gateway, the filer and the master up.
      if curl -sf -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
        -X PUT "http://127.0.0.1:$s3port/$bucket" 2>/dev/null; then
        echo "export AGENTD_TEST_S3='s3://$bucket?endpoint=http://127.0.0.1:$s3port'"
        echo "export AWS_ACCESS_KEY_ID='$key' AWS_SECRET_ACCESS_KEY='$secret'"
        return
      fi
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    remove_sockets "$dir"
    echo "s3.sh: SeaweedFS did not start (attempt $attempt); its log:" >&2
    tail -20 "$dir/server.log" >&2 || true
    rm -rf "$dir/data" && mkdir "$dir/data"
  done
  rm -rf "$dir" "$state"
  echo "s3.sh: SeaweedFS did not start" >&2
  exit 1
}

remove_sockets() {
  local p
  [ -f "$1/grpc-ports" ] || return 0
  for p in $(cat "$1/grpc-ports"); do
    rm -f /tmp/seaweedfs-{master,volume,filer,s3}-grpc-"$p".sock
  done
}

stop() {
  [ -f "$state" ] || return 0
  local dir pid
  read -r dir pid < "$state"
  terminate "$pid" 200
  remove_sockets "$dir"
  rm -rf "$dir" "$state"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/s3.sh start|stop" >&2; exit 2 ;;
esac
