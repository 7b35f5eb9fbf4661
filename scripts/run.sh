#!/usr/bin/env bash
# Builds agentd (and its web UI when missing) and runs `agentd serve` with
# SQLite and the local sandbox: open http://127.0.0.1:8080. Extra arguments
# go to `agentd serve` (e.g. --addr, --data-dir, --api-key).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec bin/agentd serve "$@"
