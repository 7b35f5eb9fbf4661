#!/usr/bin/env bash
# Builds agentd's sandbox image locally, with no registry pull: a Debian
# root file system made by mmdebstrap from Debian's packages (Node.js, git,
# curl, tini, …), the pinned agent CLIs (tools/agents: package.json +
# lockfile) and a static `agentd` binary (the executor, the container's
# main process). The result is imported into Docker and, with --oci, also
# written as an OCI image archive (for containerd / Kubernetes:
# `ctr -n k8s.io images import FILE`).
#
#   scripts/sandbox-image.sh [--tag NAME:TAG] [--agents all|claude] [--oci FILE]
#                            [--agentd BINARY] [--no-docker] [--rebuild]
#
# Two layers: the base (Debian + agent CLIs, ~1.4 GB with every CLI, ~0.55
# GB with Claude Code only) is cached under $AGENTD_IMAGE_CACHE (default
# ~/.cache/agentd/sandbox-image), keyed by its inputs (this script, the
# suite, the package list, the agents' lockfile and selection), and
# imported into Docker once as agentd-sandbox-base:<key>; the top layer
# holds only /usr/local/bin/agentd and is rebuilt when the binary changes.
# docs/sandboxes.md says how to push the image to a registry of your own.
#
# Needs root (mmdebstrap --mode=root), mmdebstrap, Go, and for the agent
# CLIs either tools/agents/node_modules installed from the lockfile
# (scripts/setup.sh) or npm. Docker is reached through DOCKER_HOST.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

tag=agentd-sandbox:latest
agents=all
oci=""
agentd_bin=""
use_docker=1
rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
  --tag) tag=$2; shift 2 ;;
  --agents) agents=$2; shift 2 ;;
  --oci) oci=$2; shift 2 ;;
  --agentd) agentd_bin=$2; shift 2 ;;
  --no-docker) use_docker=0; shift ;;
  --rebuild) rebuild=1; shift ;;
  -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
  *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$agents" in all|claude) ;; *) echo "--agents: all or claude" >&2; exit 2 ;; esac

log() { printf '\033[1m[sandbox-image]\033[0m %s\n' "$*" >&2; }
t0=$(date +%s)

suite=${AGENTD_IMAGE_SUITE:-trixie}
mirror=${AGENTD_IMAGE_MIRROR:-http://deb.debian.org/debian}
# The uid the sandbox's processes run as (the docker backend's default).
uid=10001
packages=bash,ca-certificates,coreutils,curl,findutils,git,grep,less,nodejs,procps,sed,tar,tini,util-linux
agents_dir=/usr/local/lib/agentd/agents
image_path=$agents_dir/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

cache=${AGENTD_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentd/sandbox-image}
mkdir -p "$cache"
key=$( { cat "$0"; echo "$suite $mirror $packages $agents $uid"; cat tools/agents/package-lock.json; } | sha256sum | cut -c1-16)
base_tar=$cache/base-$key.tar
base_image=agentd-sandbox-base:$key

# --- the base layer: Debian + agent CLIs, cached by key ---------------------
if [ "$rebuild" = 1 ]; then rm -f "$base_tar"; fi
if [ ! -f "$base_tar" ]; then
  command -v mmdebstrap >/dev/null || { echo "mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "building the root file system needs root (mmdebstrap --mode=root)" >&2; exit 1; }
  work=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  rootfs=$work/rootfs
  log "Debian $suite root file system (mmdebstrap)"
  t=$(date +%s)
  # No documentation, manual pages or translations: nobody reads them in a
  # sandbox, and they are a fifth of the size.
  mmdebstrap --mode=root --variant=minbase --quiet --components=main \
    --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="chroot \"\$1\" groupadd --gid $uid agent" \
    --customize-hook="chroot \"\$1\" useradd --uid $uid --gid $uid --home-dir /home/agent --create-home --shell /bin/bash agent" \
    --customize-hook='mkdir -p "$1/workspace" "$1/run/agentd" && chown '"$uid:$uid"' "$1/workspace"' \
    --customize-hook='rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/*' \
    "$suite" "$rootfs" "$mirror"
  log "root file system in $(( $(date +%s) - t ))s"

  t=$(date +%s)
  mkdir -p "$rootfs$agents_dir"
  cp tools/agents/package.json tools/agents/package-lock.json "$rootfs$agents_dir/"
  stamp=tools/agents/node_modules/.agentd-lock-hash
  lock_hash=$(sha256sum tools/agents/package-lock.json | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_hash" ]; then
    src=tools/agents/node_modules
  else
    # Same as scripts/setup.sh: exactly the locked versions (the registry
    # serves linux-x64's native packages only, see there).
    log "npm install of the pinned agent CLIs"
    cp tools/agents/package.json tools/agents/package-lock.json "$work/"
    npm install --prefix "$work" --no-save --no-audit --no-fund --loglevel=error
    src=$work/node_modules
  fi
  if [ "$agents" = all ]; then
    cp -a "$src" "$rootfs$agents_dir/"
  else
    # Claude Code alone: its package carries the native CLI.
    mkdir -p "$rootfs$agents_dir/node_modules/@anthropic-ai" "$rootfs$agents_dir/node_modules/.bin"
    cp -a "$src/@anthropic-ai/claude-code" "$rootfs$agents_dir/node_modules/@anthropic-ai/"
    ln -s ../@anthropic-ai/claude-code/bin/claude.exe "$rootfs$agents_dir/node_modules/.bin/claude"
  fi
  rm -f "$rootfs$agents_dir/node_modules/.agentd-lock-hash"
  chown -R 0:0 "$rootfs$agents_dir"
  log "agent CLIs ($agents) in $(( $(date +%s) - t ))s"

  t=$(date +%s)
  rm -f "$cache"/base-*.tar  # older keys
  tar --numeric-owner --xattrs -C "$rootfs" -cf "$base_tar.tmp" .
  mv "$base_tar.tmp" "$base_tar"
  rm -rf "$work"
  trap - EXIT
  log "base layer $(du -h "$base_tar" | cut -f1) in $(( $(date +%s) - t ))s"
else
  log "base layer cached: $base_tar"
fi

# --- the top layer: the agentd binary ---------------------------------------
top=$(mktemp -d)
trap 'rm -rf "$top"' EXIT
mkdir -p "$top/usr/local/bin"
if [ -n "$agentd_bin" ]; then
  cp "$agentd_bin" "$top/usr/local/bin/agentd"
else
  t=$(date +%s)
  version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
  commit=$(git rev-parse HEAD 2>/dev/null || true)
  # Static (no cgo): it runs on whatever C library the image has.
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/agentd/agentd.Version=$version -X github.com/agentd/agentd.Commit=$commit" \
    -o "$top/usr/local/bin/agentd" ./cmd/agentd
  log "agentd (static) built in $(( $(date +%s) - t ))s"
fi
chmod 0755 "$top/usr/local/bin/agentd"

if [ "$use_docker" = 1 ]; then
  command -v docker >/dev/null || { echo "docker CLI not found (or pass --no-docker)" >&2; exit 1; }
  if [ "$rebuild" = 1 ] || ! docker image inspect "$base_image" >/dev/null 2>&1; then
    t=$(date +%s)
    docker import \
      --change "ENV PATH=$image_path" --change 'ENV LANG=C.UTF-8' \
      --change "USER $uid:$uid" --change 'WORKDIR /workspace' \
      --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' --change 'CMD ["/bin/bash"]' \
      --message "agentd sandbox base ($suite, agents: $agents)" \
      "$base_tar" "$base_image" >/dev/null
    log "imported $base_image in $(( $(date +%s) - t ))s"
  fi
  t=$(date +%s)
  printf 'FROM %s\nCOPY usr/local/bin/agentd /usr/local/bin/agentd\nLABEL org.opencontainers.image.title=agentd-sandbox agentd.base=%s\n' \
    "$base_image" "$key" > "$top/Dockerfile"
  # The classic builder: FROM a local image, nothing pulled.
  if ! out=$(DOCKER_BUILDKIT=0 docker build --quiet --tag "$tag" "$top" 2>&1); then
    echo "$out" >&2
    exit 1
  fi
  log "$tag built in $(( $(date +%s) - t ))s"
fi

if [ -n "$oci" ]; then
  t=$(date +%s)
  scripts/oci-archive.sh "$oci" "$tag" "$image_path" "$uid" "$base_tar" "$top/usr/local/bin/agentd"
  log "OCI archive $oci ($(du -h "$oci" | cut -f1)) in $(( $(date +%s) - t ))s"
fi
log "done in $(( $(date +%s) - t0 ))s"
