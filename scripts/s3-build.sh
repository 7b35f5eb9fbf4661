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
AGENTD_TOOL_CACHE=${AGENTD_WEED_CACHE:-${AGENTD_TOOL_CACHE:-$HOME/.cache/agentd}} \
  exec "$(dirname "$0")/go-tool-build.sh" seaweedfs github.com/seaweedfs/seaweedfs github.com/seaweedfs/seaweedfs/weed weed
