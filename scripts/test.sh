#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this):
# set-up, Go vet, staticcheck, go mod tidy, govulncheck, Go tests with and
# without the race detector (real SQLite, PostgreSQL and NATS, a private
# dockerd, real processes, the real agent CLIs against mock-llm), a short
# chaos run, a short fuzzing pass, mutation testing of the changed core
# packages, the TypeScript client and UI unit tests,
# browser tests in Debian's chromium against a real server, and the
# Kubernetes sandbox on a single-node cluster in a network namespace. Each
# step's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/tools.env
# Seconds each fuzz target runs (scripts/fuzz.sh; docs/testing.md says why).
FUZZTIME=${AGENTD_FUZZTIME:-5s}
# Seconds the mutation testing step may take (docs/mutation.md).
MUTATIONBUDGET=${AGENTD_MUTATION_BUDGET:-300}

start=$(date +%s)
times=()
step_name=""
step_start=0
end_step() {
  if [ -n "$step_name" ]; then
    times+=("$(printf '%6ss  %s' $(($(date +%s) - step_start)) "$step_name")")
  fi
}
step() {
  end_step
  step_name=$*
  step_start=$(date +%s)
  printf '\n\033[1m== %s\033[0m\n' "$*"
}
# The step times, also when a step fails.
report() {
  local rc=$1
  end_step
  step_name=""
  echo
  echo "step times:"
  printf '%s\n' "${times[@]}"
  if [ "$rc" -eq 0 ]; then
    echo "all tests passed in $(($(date +%s) - start))s"
  else
    echo "FAILED (exit $rc) after $(($(date +%s) - start))s"
  fi
}
# What the steps start is stopped at exit, newest first, whatever failed;
# then the step times. One EXIT trap: a second would replace the first.
cleanups=()
on_exit() {
  local rc=$?
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
  report "$rc"
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

step "S3 (scripts/s3.sh: a throwaway SeaweedFS server for the artifact object-store tests)"
export S3STATE
S3STATE=$(mktemp -u /tmp/agentd-test-s3-state.XXXXXX)
eval "$(scripts/s3.sh start)"
cleanups+=('scripts/s3.sh stop')
# Without it the object-store tests fail instead of skipping.
export AGENTD_REQUIRE_S3=1

step "go vet"
go vet ./...

step "macOS builds (go vet and go build of cmd/agentd for darwin/arm64 and darwin/amd64)"
# The release ships darwin binaries (scripts/release.sh): Linux-only code
# stays behind _linux.go files; this keeps every package, tests included,
# compiling for macOS. Cross-compiled only: nothing runs on macOS here.
for arch in arm64 amd64; do
  GOOS=darwin GOARCH=$arch CGO_ENABLED=0 go vet ./...
  GOOS=darwin GOARCH=$arch CGO_ENABLED=0 go build -o /dev/null ./cmd/agentd
done

step "go mod tidy -diff"
go mod tidy -diff

step "staticcheck"
go run "$STATICCHECK" ./...
# Again for darwin (its own files; unused code there): a staticcheck
# built for this machine, checking the darwin/arm64 build.
sc_bin=$(mktemp -d)
cleanups+=("rm -rf '$sc_bin'")
GOBIN=$sc_bin go install "$STATICCHECK"
GOOS=darwin GOARCH=arm64 "$sc_bin/staticcheck" ./...

step "examples/custom-backend (its own module: a backend and an architecture added through the public API)"
(cd examples/custom-backend && go mod tidy -diff && go vet ./... && go run "$STATICCHECK" ./... && go test -count=1 ./...)

step "govulncheck"
# It needs the vulnerability database at vuln.go.dev (or a copy named by
# AGENTD_VULNDB, e.g. file:///srv/vulndb); where that cannot be reached
# the step is skipped, saying so, rather than failed.
vulndb=()
[ -n "${AGENTD_VULNDB:-}" ] && vulndb=(-db "$AGENTD_VULNDB")
if out=$(go run "$GOVULNCHECK" "${vulndb[@]}" ./... 2>&1); then
  echo "$out"
else
  rc=$?
  if grep -q "fetching vulnerabilities" <<<"$out"; then
    echo "govulncheck SKIPPED: the vulnerability database cannot be reached from here:"
    grep "fetching vulnerabilities" <<<"$out"
  else
    echo "$out"
    exit "$rc"
  fi
fi

# The chaos test runs once, in its own step, under -race.
mapfile -t pkgs < <(go list ./... | grep -v '/tests/chaos$')

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
# The upgrade test builds the previous release from its commit (cached):
# a clone without that history fails instead of skipping it.
export AGENTD_REQUIRE_UPGRADE=1
go test -count=1 -timeout 30m "${pkgs[@]}"

step "go test -race"
# Every package: the agentd processes tests start are built with -race too
# (internal/agentdtest), and a race they report fails the test.
go test -count=1 -race -timeout 40m "${pkgs[@]}"

step "chaos (short run, -race)"
# Bounded by AGENTD_CHAOS_ROUNDS / AGENTD_CHAOS_DURATION (docs/chaos.md).
# -v prints the seed, each round's faults and what the run did.
go test -count=1 -race -timeout 15m -v ./tests/chaos

step "fuzz ($FUZZTIME a target)"
scripts/fuzz.sh "$FUZZTIME"

step "mutation testing (changed core packages, ${MUTATIONBUDGET}s budget)"
# scripts/mutation.sh --ci: gremlins on the core packages changed in the
# last 10 commits (else a small fixed sample), each package's efficacy
# against its floor, stopped at the budget (docs/mutation.md).
AGENTD_MUTATION_BUDGET=$MUTATIONBUDGET scripts/mutation.sh --ci

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
# The Helm CLI of the chart's tests, built once per machine and cached.
scripts/helm-build.sh >/dev/null
echo "kubernetes set-up: $(( $(date +%s) - kube_start ))s"
# Missing cluster or image fail the kubernetes tests instead of skipping them.
kube_test() {
  env $kube_env AGENTD_REQUIRE_KUBERNETES=1 AGENTD_REQUIRE_AGENTS=1 \
    nsenter --net="/run/netns/${AGENTD_KUBE_NETNS:-agentd-kube}" go test -count=1 -timeout 20m "$@"
}
kube_test ./internal/sandbox/kubernetes/
# TestKubernetesHelm and TestKubernetesManifests are the Helm chart and the
# kustomize manifests (docs/deploy.md).
kube_test -run 'TestKubernetes|TestIsolation/kubernetes' .
echo "kubernetes step: $(( $(date +%s) - kube_start ))s"

step "TypeScript client and UI unit tests"
# AGENTD_BIN lets the TS client also check its schema against a live server.
AGENTD_BIN="$PWD/bin/agentd" npm test --prefix web --silent

step "Socket.IO compatibility (real socket.io-client)"
AGENTD_BIN="$PWD/bin/agentd" npm test --prefix tests/socketio --silent

step "browser tests (chromium)"
AGENTD_BIN="$PWD/bin/agentd" npm run e2e --prefix web --silent

