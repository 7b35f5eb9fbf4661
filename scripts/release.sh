#!/usr/bin/env bash
# Release builds: static agentd binaries (CGO_ENABLED=0, -trimpath) with the
# web UI embedded and the version and commit stamped (`agentd version`),
# for linux/amd64, linux/arm64, darwin/amd64 and darwin/arm64, each in a
# tar.gz with the README and docs/deploy.md (and, for Linux, the systemd
# unit); SHA-256 checksums of everything (SHA256SUMS) and a CycloneDX SBOM
# of the Go modules linked into the binaries built (agentd-<version>.cdx.json).
#
#   scripts/release.sh [--version V] [--out DIR] [--targets "linux/amd64 …"]
#   scripts/release.sh --binary-only --os OS --arch ARCH [--version V] --out FILE
#
# Default version: `git describe --tags --always --dirty`; default DIR
# bin/release/<version>. --binary-only builds one binary to FILE (what
# scripts/agentd-image.sh uses). Everything is built here, offline: the
# UI with npm from web/'s lockfile (as scripts/build.sh), the binaries
# with the Go modules go.sum pins.
#
# The darwin (macOS) binaries are cross-compiled and never run here. They
# hold the whole CLI (run, token, convert, mock-llm, version) and `agentd
# serve` with the local sandbox (the default; file changes found by
# polling, once a second, as there is no inotify) and the stores and
# fleet options; the executor and bwrap sandboxes need Linux and say so
# at start (docs/deploy.md has the details). No Windows build.
set -euo pipefail
cd "$(dirname "$0")/.."

version="" out="" targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
binary_only=0 os="" arch=""
while [ $# -gt 0 ]; do
  case "$1" in
  --version) version=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --targets) targets=$2; shift 2 ;;
  --binary-only) binary_only=1; shift ;;
  --os) os=$2; shift 2 ;;
  --arch) arch=$2; shift 2 ;;
  -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
  *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { printf '\033[1m[release]\033[0m %s\n' "$*" >&2; }

[ -n "$version" ] || version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
commit=$(git rev-parse HEAD 2>/dev/null || true)
ldflags="-s -w -X github.com/agentd/agentd.Version=$version -X github.com/agentd/agentd.Commit=$commit"

# The UI, when its build is missing or older than its sources (the same
# check as scripts/build.sh).
if [ ! -f web/dist/index.html ] || [ -n "$(find web/src web/index.html clients/ts/src -newer web/dist/index.html -print -quit 2>/dev/null)" ]; then
  log "building the web UI"
  [ -d web/node_modules ] || npm ci --prefix web --no-audit --no-fund --loglevel=error
  [ -d clients/ts/node_modules ] || npm ci --prefix clients/ts --no-audit --no-fund --loglevel=error
  npm run --prefix web build --silent
fi

build() { # build OS ARCH FILE
  CGO_ENABLED=0 GOOS=$1 GOARCH=$2 go build -trimpath -ldflags "$ldflags" -o "$3" ./cmd/agentd
}

if [ "$binary_only" = 1 ]; then
  [ -n "$os" ] && [ -n "$arch" ] && [ -n "$out" ] || { echo "--binary-only needs --os, --arch and --out" >&2; exit 2; }
  build "$os" "$arch" "$out"
  exit 0
fi

[ -n "$out" ] || out=bin/release/$version
mkdir -p "$out"
out=$(cd "$out" && pwd)
t0=$(date +%s)
# What each binary links (go version -m), for the SBOM.
modinfo=$(mktemp)
for target in $targets; do
  os=${target%/*} arch=${target#*/}
  name=agentd-$version-$os-$arch
  stage=$(mktemp -d)
  t=$(date +%s)
  mkdir -p "$stage/$name"
  build "$os" "$arch" "$stage/$name/agentd"
  go version -m "$stage/$name/agentd" >>"$modinfo"
  cp README.md "$stage/$name/"
  cp docs/deploy.md "$stage/$name/DEPLOY.md"
  if [ "$os" = linux ]; then
    cp deploy/systemd/agentd.service "$stage/$name/"
  fi
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$stage" -czf "$out/$name.tar.gz" "$name"
  rm -rf "$stage"
  log "$name.tar.gz in $(( $(date +%s) - t ))s"
done

# The SBOM: the modules linked into any of the binaries built (go version
# -m; the platforms differ by a few: prometheus/procfs is Linux's only).
awk -v version="$version" -v commit="$commit" -v now="$(date -u +%Y-%m-%dT%H:%M:%SZ)" '
function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
BEGIN { n = 0 }
NR == 1 { gover = $2 }  # "<file>: go1.26.8"
$1 == "dep" && ($2 in seen) { skip = 1; next }  # listed by an earlier binary
$1 == "dep" { skip = 0; seen[$2] = 1 }
$1 == "=>" && skip { next }
$1 == "dep" || $1 == "=>" {
  if ($1 == "=>") { n--; }  # a replacement: its target replaces the entry
  path = $2; ver = $3; sum = $4
  p[n] = path; v[n] = ver; h[n] = sum; n++
}
END {
  printf "{\n  \"bomFormat\": \"CycloneDX\",\n  \"specVersion\": \"1.5\",\n  \"version\": 1,\n"
  printf "  \"metadata\": {\n    \"timestamp\": \"%s\",\n    \"tools\": [{\"name\": \"scripts/release.sh (go version -m)\"}],\n", now
  printf "    \"component\": {\"type\": \"application\", \"name\": \"agentd\", \"version\": \"%s\", \"purl\": \"pkg:golang/github.com/agentd/agentd@%s\", \"properties\": [{\"name\": \"vcs.revision\", \"value\": \"%s\"}, {\"name\": \"go\", \"value\": \"%s\"}]}\n  },\n", esc(version), esc(version), esc(commit), esc(gover)
  printf "  \"components\": ["
  for (i = 0; i < n; i++) {
    printf "%s\n    {\"type\": \"library\", \"name\": \"%s\", \"version\": \"%s\", \"purl\": \"pkg:golang/%s@%s\"", (i ? "," : ""), esc(p[i]), esc(v[i]), esc(p[i]), esc(v[i])
    if (h[i] != "") printf ", \"properties\": [{\"name\": \"go.sum\", \"value\": \"%s\"}]", esc(h[i])
    printf "}"
  }
  printf "\n  ]\n}\n"
}' "$modinfo" >"$out/agentd-$version.cdx.json"
rm -f "$modinfo"

(cd "$out" && rm -f SHA256SUMS && sha256sum -- *.tar.gz *.cdx.json >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
log "release $version in $out ($(( $(date +%s) - t0 ))s):"
ls -l "$out" >&2
echo "$out"
