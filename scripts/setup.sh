#!/usr/bin/env bash
# Installs what agentd's tests need on a fresh Debian machine: Debian
# packages (bubblewrap, chromium, postgresql, nats-server, docker.io, mmdebstrap,
# containerd, runc, containernetworking-plugins, busybox-static, systemd), the pinned agent CLIs and the UI's npm
# packages (from their lockfiles), the Go modules, and the SeaweedFS server of
# the artifact tests (built from its module). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

apt_pkgs=()
command -v bwrap >/dev/null 2>&1 || apt_pkgs+=(bubblewrap)
[ -x /usr/bin/chromium ] || apt_pkgs+=(chromium)
command -v useradd >/dev/null 2>&1 || apt_pkgs+=(passwd)
command -v curl >/dev/null 2>&1 || apt_pkgs+=(curl) # shell sessions of the tests call the model proxy
# PostgreSQL server binaries for the store/postgres and fleet tests
# (scripts/pg.sh starts a throwaway server; nothing runs as a service).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_pkgs+=(postgresql)
# A NATS server for the fleet tests (scripts/nats.sh starts a throwaway
# one; the package's service is not used).
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_pkgs+=(nats-server)
# The docker sandbox's tests: a daemon (started by scripts/dockerd.sh) and
# mmdebstrap for the sandbox image's root file system.
command -v dockerd >/dev/null 2>&1 || apt_pkgs+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || apt_pkgs+=(mmdebstrap)
# The kubernetes sandbox's tests: a private containerd with runc and the
# CNI plugins for the test cluster (scripts/kube.sh), openssl for its
# certificates, iproute2 and nsenter for its network namespace.
command -v containerd >/dev/null 2>&1 || apt_pkgs+=(containerd)
command -v runc >/dev/null 2>&1 || apt_pkgs+=(runc)
[ -x /usr/lib/cni/bridge ] || apt_pkgs+=(containernetworking-plugins)
command -v openssl >/dev/null 2>&1 || apt_pkgs+=(openssl)
command -v curl >/dev/null 2>&1 || apt_pkgs+=(curl)
command -v ip >/dev/null 2>&1 || apt_pkgs+=(iproute2)
command -v nsenter >/dev/null 2>&1 || apt_pkgs+=(util-linux)
# agentd's own image (scripts/agentd-image.sh): a static busybox and the
# CA bundle; systemd-analyze checks the systemd unit (TestSystemdUnit).
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || apt_pkgs+=(busybox-static)
command -v file >/dev/null 2>&1 || apt_pkgs+=(file)
[ -f /etc/ssl/certs/ca-certificates.crt ] || apt_pkgs+=(ca-certificates)
command -v systemd-analyze >/dev/null 2>&1 || apt_pkgs+=(systemd)
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  log "installing Debian packages: ${apt_pkgs[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
fi

# npm ci only when the lockfile changed since the last install.
npm_ci() {
  local dir=$1 how=${2:-ci} stamp="$1/node_modules/.agentd-lock-hash" hash
  hash=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
    return
  fi
  log "npm $how in $dir"
  if [ "$how" = ci ]; then
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
  else
    npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error
  fi
  echo "$hash" > "$stamp"
}
# The agent CLIs ship native binaries as optional per-platform packages; the
# registry reachable here serves only linux-x64's, so the lockfile cannot
# list the others and `npm ci` would refuse it. `npm install --no-save`
# installs exactly the locked versions and skips the unavailable platforms.
npm_ci tools/agents install
npm_ci clients/ts
npm_ci web
npm_ci tests/socketio

log "go mod download"
go mod download
# The embedding example is a module of its own (examples/custom-backend).
(cd examples/custom-backend && go mod download)
# The pinned checkers (downloaded and built once; later runs hit the cache).
. scripts/tools.env
go run "$STATICCHECK" -version >/dev/null
go run "$GOVULNCHECK" -version >/dev/null
go run "$GREMLINS" --version >/dev/null
# The SeaweedFS server whose S3 gateway the artifact tests use
# (scripts/s3.sh), pinned in tools/seaweedfs: built once per version into
# ~/.cache/agentd (about 9 min and 4.7 GB of module and build caches the
# first time; later runs find the binary).
log "SeaweedFS (scripts/s3-build.sh)"
scripts/s3-build.sh >/dev/null
log "done"
