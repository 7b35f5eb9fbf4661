#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this):
# set-up, Go vet and tests (real SQLite and PostgreSQL, real processes, the real agent CLIs
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

step "Kubernetes (scripts/kube.sh: a single-node cluster in a network namespace; kubernetes sandbox tests)"
# The cluster's binaries are built from the Go modules once per machine
# and version (scripts/kube-build.sh, ~/.cache/agentd/kube-*); the cluster
# and the servers under test run in a network namespace of their own, and
# the tests import the sandbox image (the base layer cached above) into
# the cluster's private containerd.
kube_start=$(date +%s)
kube_dir=${AGENTD_KUBE_DIR:-/tmp/agentd-test-kube}
cleanups+=('scripts/kube.sh stop "$kube_dir"')
kube_env=$(scripts/kube.sh start "$kube_dir")
scripts/sandbox-image.sh --no-docker --agents claude --agentd bin/agentd
echo "kubernetes set-up: $(( $(date +%s) - kube_start ))s"
# Missing cluster or image fail the kubernetes tests instead of skipping them.
kube_test() {
  env $kube_env AGENTD_REQUIRE_KUBERNETES=1 AGENTD_REQUIRE_AGENTS=1 \
    nsenter --net="/run/netns/${AGENTD_KUBE_NETNS:-agentd-kube}" go test -count=1 -timeout 20m "$@"
}
kube_test ./internal/sandbox/kubernetes/
kube_test -run 'TestKubernetes|TestIsolation/kubernetes' .
echo "kubernetes step: $(( $(date +%s) - kube_start ))s"

step "TypeScript client and UI unit tests"
# AGENTD_BIN lets the TS client also check its schema against a live server.
AGENTD_BIN="$PWD/bin/agentd" npm test --prefix web --silent

step "Socket.IO compatibility (real socket.io-client)"
AGENTD_BIN="$PWD/bin/agentd" npm test --prefix tests/socketio --silent

step "browser tests (chromium)"
AGENTD_BIN="$PWD/bin/agentd" npm run e2e --prefix web --silent

echo
echo "all tests passed in $(( $(date +%s) - start ))s"
