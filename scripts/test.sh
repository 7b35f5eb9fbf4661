#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this):
# set-up, Go vet and tests (real SQLite, PostgreSQL and NATS, real processes, the real agent CLIs
# against mock-llm), the TypeScript client and UI unit tests, and browser
# tests in Debian's chromium against a real server.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
start=$(date +%s)

# What the steps start is stopped at exit, newest first, whatever failed.
cleanups=()
on_exit() {
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
}
trap on_exit EXIT

step "setup"
scripts/setup.sh

step "build (UI embedded)"
scripts/build.sh

step "PostgreSQL (scripts/pg.sh: a throwaway server for the store/postgres and fleet tests)"
export PGSTATE
PGSTATE=$(mktemp -u /tmp/agentd-test-pg-state.XXXXXX)
eval "$(scripts/pg.sh start)"
cleanups+=('scripts/pg.sh stop')
# Without it the PostgreSQL tests fail instead of skipping.
export AGENTD_REQUIRE_POSTGRES=1

step "NATS (scripts/nats.sh: a throwaway nats-server for the fleet tests)"
export NATSSTATE
NATSSTATE=$(mktemp -u /tmp/agentd-test-nats-state.XXXXXX)
eval "$(scripts/nats.sh start)"
cleanups+=('scripts/nats.sh stop')
# Without it the fleet tests fail instead of skipping.
export AGENTD_REQUIRE_NATS=1

step "go vet"
go vet ./...

step "dockerd and the sandbox image (docker sandbox tests)"
# A private daemon (no systemd here) and the sandbox image with Claude Code
# only (the e2e tests need no other CLI); both kept under the cache folder,
# so a second run on the same machine reuses the image.
docker_start=$(date +%s)
docker_dir=${AGENTD_DOCKER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agentd/dockerd}
export "$(scripts/dockerd.sh start "$docker_dir")"
cleanups+=('scripts/dockerd.sh stop "$docker_dir"')
scripts/sandbox-image.sh --agents claude --agentd bin/agentd --tag agentd-sandbox:latest
# Missing Docker or image fail the docker tests instead of skipping them.
export AGENTD_REQUIRE_DOCKER=1
echo "docker set-up: $(( $(date +%s) - docker_start ))s"

step "go test"
# Missing agent CLIs fail the run instead of skipping tests.
export AGENTD_REQUIRE_AGENTS=1
go test -count=1 -timeout 30m ./...

step "go test -race (core packages)"
go test -count=1 -race -timeout 20m ./conversation/... ./internal/eventlog/... ./internal/session/... ./internal/api/... ./store/...

step "TypeScript client and UI unit tests"
# AGENTD_BIN lets the TS client also check its schema against a live server.
AGENTD_BIN="$PWD/bin/agentd" npm test --prefix web --silent

step "Socket.IO compatibility (real socket.io-client)"
AGENTD_BIN="$PWD/bin/agentd" npm test --prefix tests/socketio --silent

step "browser tests (chromium)"
AGENTD_BIN="$PWD/bin/agentd" npm run e2e --prefix web --silent

echo
echo "all tests passed in $(( $(date +%s) - start ))s"
