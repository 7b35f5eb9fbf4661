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
AGENTD_TOOL_CACHE=${AGENTD_HELM_CACHE:-${AGENTD_TOOL_CACHE:-$HOME/.cache/agentd}} \
  exec "$(dirname "$0")/go-tool-build.sh" helm helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm helm \
  '-X helm.sh/helm/v3/internal/version.version=$VERSION'
