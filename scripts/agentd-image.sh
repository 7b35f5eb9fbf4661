#!/usr/bin/env bash
# Builds the container image of the agentd server itself, with no registry
# pull and no base image: one layer holding
#
#   /usr/local/bin/agentd          the static binary (web UI embedded)
#   /bin/busybox + /bin/sh, …      busybox-static: the shell the `shell`
#                                  runtime and the local sandbox's sessions
#                                  run (`sh -c`), and wget for the health
#                                  check; nothing else of a distribution
#   /etc/ssl/certs/ca-certificates.crt   the host's CA bundle
#   /etc/passwd, /etc/group        root and agentd (uid/gid 65532)
#   /data (owned by agentd)        the data folder: SQLite, workspaces
#   /tmp (1777)
#
# running as 65532:65532, `agentd serve --addr 0.0.0.0:8080 --data-dir /data`,
# with a health check on /health. The result is written as one tar that is
# both an OCI image layout (what `ctr images import` and skopeo read) and a
# `docker save` archive (what `docker load` of Docker 20.10 reads).
#
#   scripts/agentd-image.sh [--tag NAME:TAG] [--out FILE] [--agentd BINARY]
#                           [--version V] [--arch amd64|arm64] [--load]
#
# --agentd uses a binary built already (it must be static: CGO_ENABLED=0);
# otherwise the script builds one (scripts/release.sh's flags: UI embedded,
# version and commit stamped). --load loads it into Docker (DOCKER_HOST).
# Default tag agentd:<version>, default FILE bin/agentd-image-<arch>.tar.
# Needs busybox-static and ca-certificates (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

tag="" out="" agentd_bin="" version="" arch=amd64 load=0
while [ $# -gt 0 ]; do
  case "$1" in
  --tag) tag=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --agentd) agentd_bin=$2; shift 2 ;;
  --version) version=$2; shift 2 ;;
  --arch) arch=$2; shift 2 ;;
  --load) load=1; shift ;;
  -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
  *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { printf '\033[1m[agentd-image]\033[0m %s\n' "$*" >&2; }

[ -n "$version" ] || version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
[ -n "$tag" ] || tag=agentd:$version
[ -n "$out" ] || out=bin/agentd-image-$arch.tar
uid=65532
busybox=${AGENTD_BUSYBOX:-/bin/busybox}
certs=/etc/ssl/certs/ca-certificates.crt
[ "$arch" = amd64 ] || [ -n "${AGENTD_BUSYBOX:-}" ] ||
  { echo "--arch $arch: set AGENTD_BUSYBOX to a static busybox for $arch" >&2; exit 1; }
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
  { echo "$busybox is not a static busybox (apt-get install busybox-static)" >&2; exit 1; }
[ -f "$certs" ] || { echo "$certs missing (apt-get install ca-certificates)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/agentd-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,etc/ssl/certs,usr/local/bin,data,tmp}

if [ -z "$agentd_bin" ]; then
  t=$(date +%s)
  scripts/release.sh --binary-only --os linux --arch "$arch" --version "$version" --out "$work/agentd" >&2
  agentd_bin=$work/agentd
  log "agentd $version (static, linux/$arch) built in $(( $(date +%s) - t ))s"
fi
file -L "$agentd_bin" | grep -q 'statically linked' ||
  { echo "$agentd_bin is not statically linked (build it with CGO_ENABLED=0)" >&2; exit 1; }
cp "$agentd_bin" "$root/usr/local/bin/agentd"
cp "$busybox" "$root/bin/busybox"
for applet in sh cat ls mkdir rm cp mv env sleep echo printf wget ps kill id grep sed head tail true false; do
  ln -s busybox "$root/bin/$applet"
done
cp "$certs" "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nagentd:x:%s:%s:agentd:/data:/sbin/nologin\n' $uid $uid >"$root/etc/passwd"
printf 'root:x:0:\nagentd:x:%s:\n' $uid >"$root/etc/group"
chmod 0755 "$root"/{bin,etc,usr,usr/local,usr/local/bin,usr/local/bin/agentd}
chmod 1777 "$root/tmp"
chmod 0750 "$root/data"

mkdir -p "$work/layout/blobs/sha256"
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blob() { # blob FILE: moves FILE into the layout, prints its digest
  local d
  d=$(sha "$1")
  mv "$1" "$work/layout/blobs/sha256/$d"
  echo "$d"
}

# Owned by root but /data (agentd's), at a fixed time: the same binary
# gives the same layer digest.
tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$root" -cf "$work/layer.tar" \
  --exclude=./data .
tar --numeric-owner --owner=$uid --group=$uid --mtime=@0 -C "$root" -rf "$work/layer.tar" ./data
layer_s=$(size "$work/layer.tar")
layer_d=$(blob "$work/layer.tar")

created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
commit=$(git rev-parse HEAD 2>/dev/null || true)
# Healthcheck is Docker's extension of the image config (nanoseconds);
# Kubernetes ignores it and probes /health itself (the Helm chart).
cat >"$work/config.json" <<EOF
{"created":"$created","architecture":"$arch","os":"linux",
 "config":{"User":"$uid:$uid","Env":["PATH=/usr/local/bin:/bin","HOME=/data","AGENTD_DATA_DIR=/data","AGENTD_ADDR=0.0.0.0:8080"],
  "Entrypoint":["/usr/local/bin/agentd"],"Cmd":["serve"],"WorkingDir":"/data",
  "ExposedPorts":{"8080/tcp":{}},"Volumes":{"/data":{}},"StopSignal":"SIGTERM",
  "Healthcheck":{"Test":["CMD-SHELL","wget -q -O /dev/null http://127.0.0.1:\${AGENTD_ADDR##*:}/health"],"Interval":10000000000,"Timeout":5000000000,"StartPeriod":5000000000,"Retries":3},
  "Labels":{"org.opencontainers.image.title":"agentd","org.opencontainers.image.version":"$version","org.opencontainers.image.revision":"$commit","org.opencontainers.image.source":"https://github.com/agentd/agentd"}},
 "rootfs":{"type":"layers","diff_ids":["sha256:$layer_d"]},
 "history":[{"created":"$created","comment":"agentd, busybox, CA certificates (scripts/agentd-image.sh)"}]}
EOF
config_s=$(size "$work/config.json")
config_d=$(blob "$work/config.json")

printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_d\",\"size\":$config_s},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$layer_d\",\"size\":$layer_s}]}" >"$work/manifest"
manifest_s=$(size "$work/manifest")
manifest_d=$(blob "$work/manifest")

# containerd names the image from io.containerd.image.name; docker load
# from manifest.json's RepoTags.
full=docker.io/library/$tag
if [[ $tag == */* ]]; then
  first=${tag%%/*}
  if [[ $first == *.* || $first == *:* || $first == localhost ]]; then full=$tag; else full=docker.io/$tag; fi
fi
printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest_d\",\"size\":$manifest_s,\"annotations\":{\"io.containerd.image.name\":\"$full\",\"org.opencontainers.image.ref.name\":\"$tag\"},\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"}}]}" >"$work/layout/index.json"
printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
printf '%s' "[{\"Config\":\"blobs/sha256/$config_d\",\"RepoTags\":[\"$tag\"],\"Layers\":[\"blobs/sha256/$layer_d\"]}]" >"$work/layout/manifest.json"

mkdir -p "$(dirname "$out")"
tar -C "$work/layout" -cf "$out.tmp" oci-layout index.json manifest.json blobs
mv "$out.tmp" "$out"
log "$tag: $out ($(du -h "$out" | cut -f1))"
if [ "$load" = 1 ]; then
  docker load -i "$out" >&2
fi
echo "$tag"
