#!/usr/bin/env bash
# Builds one binary of a Go module pinned in tools/<dir>/go.mod into a
# cache keyed by the module's version, once per machine and version:
#
#   scripts/go-tool-build.sh DIR MODULE PACKAGE NAME [LDFLAGS]
#
# e.g. `scripts/go-tool-build.sh helm helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm helm`
# builds ~/.cache/agentd/helm-<version>/helm ($AGENTD_TOOL_CACHE overrides
# ~/.cache/agentd). LDFLAGS is added to "-s -w"; $VERSION in it is the
# module's version. A cached binary is used as it is. Prints the binary's
# path on its last line. No binary is ever committed. helm-build.sh and
# s3-build.sh are this with their arguments.
set -euo pipefail

[[ $# -ge 4 ]] || { echo "usage: $0 DIR MODULE PACKAGE NAME [LDFLAGS]" >&2; exit 2; }
dir=$1 module=$2 pkg=$3 name=$4 extra=${5:-}
mod=$(cd "$(dirname "$0")/.." && pwd)/tools/$dir
ver=$(awk -v m="$module" '$1 == "require" && $2 == m { print $3; exit }' "$mod/go.mod")
[[ -n $ver ]] || { echo "$name build: $module's version not found in $mod/go.mod" >&2; exit 1; }
bin=${AGENTD_TOOL_CACHE:-$HOME/.cache/agentd}/$name-$ver/$name
if [[ -x $bin ]]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$(dirname "$bin")"
cd "$mod"
t0=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w ${extra//\$VERSION/$ver}" -o "$bin.tmp" "$pkg"
mv "$bin.tmp" "$bin"
echo "$name build: $name $ver in $((SECONDS - t0)) s" >&2
echo "$bin"
