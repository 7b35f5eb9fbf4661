#!/usr/bin/env bash
# Writes an OCI image archive (an image layout in a tar, what
# `ctr images import` and `skopeo copy oci-archive:` read) of the sandbox
# image from its two layers: the base root file system tar and the agentd
# binary. Layers are stored uncompressed (media type …layer.v1.tar), so
# each layer's digest is also its diff id. Called by sandbox-image.sh.
#
#   scripts/oci-archive.sh OUT REF PATH UID BASE_TAR AGENTD_BINARY
set -euo pipefail

out=$1 ref=$2 path=$3 uid=$4 base_tar=$5 agentd=$6
layout=$(mktemp -d "$(dirname "$out")/oci.XXXXXX")
trap 'rm -rf "$layout"' EXIT
mkdir -p "$layout/blobs/sha256"

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
# blob FILE: moves (or links) FILE into the layout, prints its digest.
blob() {
  local d
  d=$(sha "$1")
  ln "$1" "$layout/blobs/sha256/$d" 2>/dev/null || cp "$1" "$layout/blobs/sha256/$d"
  echo "$d"
}

# The top layer: /usr/local/bin/agentd, with its folders, owned by root,
# at a fixed time (the same binary gives the same digest).
top=$(mktemp -d)
mkdir -p "$top/usr/local/bin"
cp "$agentd" "$top/usr/local/bin/agentd"
chmod 0755 "$top/usr" "$top/usr/local" "$top/usr/local/bin" "$top/usr/local/bin/agentd"
tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$top" -cf "$layout/top.tar" usr
rm -rf "$top"

base_d=$(blob "$base_tar")
top_d=$(blob "$layout/top.tar")
rm -f "$layout/top.tar"
base_s=$(size "$base_tar")
top_s=$(size "$layout/blobs/sha256/$top_d")

created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
printf '%s' "{\"created\":\"$created\",\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"User\":\"$uid:$uid\",\"Env\":[\"PATH=$path\",\"LANG=C.UTF-8\"],\"Entrypoint\":[\"/usr/bin/tini\",\"--\"],\"Cmd\":[\"/bin/bash\"],\"WorkingDir\":\"/workspace\",\"Labels\":{\"org.opencontainers.image.title\":\"agentd-sandbox\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$base_d\",\"sha256:$top_d\"]},\"history\":[{\"created\":\"$created\",\"comment\":\"Debian and the agent CLIs (scripts/sandbox-image.sh)\"},{\"created\":\"$created\",\"comment\":\"agentd\"}]}" > "$layout/config.json"
config_d=$(blob "$layout/config.json")
config_s=$(size "$layout/config.json")
rm -f "$layout/config.json"

printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_d\",\"size\":$config_s},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$base_d\",\"size\":$base_s},{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$top_d\",\"size\":$top_s}]}" > "$layout/manifest.json"
manifest_d=$(blob "$layout/manifest.json")
manifest_s=$(size "$layout/manifest.json")
rm -f "$layout/manifest.json"

# containerd names the image from io.containerd.image.name; other tools
# read org.opencontainers.image.ref.name.
full=docker.io/library/$ref
if [[ $ref == */* ]]; then
  first=${ref%%/*}
  if [[ $first == *.* || $first == *:* || $first == localhost ]]; then
    full=$ref # names its registry
  else
    full=docker.io/$ref
  fi
fi
printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest_d\",\"size\":$manifest_s,\"annotations\":{\"io.containerd.image.name\":\"$full\",\"org.opencontainers.image.ref.name\":\"$ref\"},\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"}}]}" > "$layout/index.json"
printf '%s' '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"

tar -C "$layout" -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
