#!/usr/bin/env bash
# Builds the Helm CLI the chart tests run (helm.sh/helm/v3, pinned in
# tools/helm/go.mod) into a cache keyed by its version:
#
#   ~/.cache/agentd/helm-<version>/helm
#
# (AGENTD_HELM_CACHE overrides ~/.cache/agentd). A cached binary is used as
# it is: the build (about 2 min on 2 idle cores, 8 on a loaded machine)
# runs once per machine and version. Prints the binary's path on its last
# line. No binary is ever committed.
set -euo pipefail

mod=$(cd "$(dirname "$0")/.." && pwd)/tools/helm
ver=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3; exit }' "$mod/go.mod")
[[ -n $ver ]] || { echo "helm-build: version not found in $mod/go.mod" >&2; exit 1; }
bin=${AGENTD_HELM_CACHE:-$HOME/.cache/agentd}/helm-$ver/helm
if [[ -x $bin ]]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$(dirname "$bin")"
cd "$mod"
t0=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$ver" -o "$bin.tmp" helm.sh/helm/v3/cmd/helm
mv "$bin.tmp" "$bin"
echo "helm-build: helm $ver in $((SECONDS - t0)) s" >&2
echo "$bin"
