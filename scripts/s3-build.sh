#!/usr/bin/env bash
# Builds the SeaweedFS server (`weed`, whose S3 gateway the artifact tests
# use: scripts/s3.sh) from the module pinned in tools/seaweedfs/go.mod into
# a cache keyed by its version:
#
#   ~/.cache/agentd/weed-<version>/weed
#
# (AGENTD_WEED_CACHE overrides ~/.cache/agentd). A cached binary is used as
# it is: the build (about 9 min on 2 loaded cores, 6 min of CPU; 1.9 GB of
# modules and 2.8 GB of build cache the first time, a 157 MB binary) runs
# once per machine and version. Prints the binary's path on its last line.
# No binary is ever committed.
set -euo pipefail

mod=$(cd "$(dirname "$0")/.." && pwd)/tools/seaweedfs
ver=$(awk '$1 == "require" && $2 == "github.com/seaweedfs/seaweedfs" { print $3; exit }' "$mod/go.mod")
[[ -n $ver ]] || { echo "s3-build: version not found in $mod/go.mod" >&2; exit 1; }
bin=${AGENTD_WEED_CACHE:-$HOME/.cache/agentd}/weed-$ver/weed
if [[ -x $bin ]]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$(dirname "$bin")"
cd "$mod"
t0=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bin.tmp" github.com/seaweedfs/seaweedfs/weed
mv "$bin.tmp" "$bin"
echo "s3-build: weed $ver in $((SECONDS - t0)) s" >&2
echo "$bin"
