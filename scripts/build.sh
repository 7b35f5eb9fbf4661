#!/usr/bin/env bash
# Builds bin/agentd with the web UI embedded. Builds the UI first when its
# assets are missing or older than its sources (needs Node.js and npm).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f web/dist/index.html ] || [ -n "$(find web/src web/index.html clients/ts/src -newer web/dist/index.html -print -quit 2>/dev/null)" ]; then
  echo "[build] building the web UI" >&2
  [ -d web/node_modules ] || npm ci --prefix web --no-audit --no-fund --loglevel=error
  [ -d clients/ts/node_modules ] || npm ci --prefix clients/ts --no-audit --no-fund --loglevel=error
  npm run --prefix web build --silent
fi
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
commit=$(git rev-parse HEAD 2>/dev/null || true)
mkdir -p bin
go build -ldflags "-X github.com/agentd/agentd.Version=$version -X github.com/agentd/agentd.Commit=$commit" -o bin/agentd ./cmd/agentd
echo "[build] bin/agentd ($version)" >&2
