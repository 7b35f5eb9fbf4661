#!/usr/bin/env bash
# Starts or stops the PostgreSQL server the tests use (store/postgres, the
# benchmarks, the fleet tests), from Debian's postgresql package.
#
#   eval "$(scripts/pg.sh start)"   # prints export AGENTD_TEST_POSTGRES=…
#   scripts/pg.sh stop
#
# The cluster lives in a temporary folder (recorded in $PGSTATE, default
# /tmp/agentd-test-pg.state), listens only on a Unix socket in that folder
# (no TCP), trusts local connections, and runs as the postgres system user
# when started by root (PostgreSQL refuses to run as root). Go tests that
# find no AGENTD_TEST_POSTGRES start a private server the same way
# (store/postgres/pgtest), so this script is only what CI and developers
# use to share one server across packages.
set -euo pipefail

state=${PGSTATE:-/tmp/agentd-test-pg.state}

bindir() {
  if command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
    echo "pg.sh: PostgreSQL server binaries not found (install postgresql: scripts/setup.sh)" >&2
    exit 1
  fi
  echo "$d"
}

# as runs a command as the server's user: root runs it as postgres (or
# agentd-pg, created when neither exists); anyone else as themselves.
as() {
  if [ "$(id -u)" != 0 ]; then
    "$@"
    return
  fi
  local u=postgres
  if ! id -u postgres >/dev/null 2>&1; then
    u=agentd-pg
    id -u "$u" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
  fi
  setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"
}

owner() {
  if [ "$(id -u)" = 0 ]; then
    if id -u postgres >/dev/null 2>&1; then echo postgres; else echo agentd-pg; fi
  else
    id -un
  fi
}

start() {
  if [ -f "$state" ]; then
    echo "pg.sh: a server is already recorded in $state; run scripts/pg.sh stop first" >&2
    exit 1
  fi
  local bin dir
  bin=$(bindir)
  as true # creates the user if needed
  dir=$(mktemp -d /tmp/agentd-test-pg.XXXXXX)
  chown "$(owner)" "$dir"
  echo "$dir" > "$state"
  # C collation (bytes order), as the store contract requires.
  as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-locale -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  # PGLISTEN=ADDR also listens on ADDR:5432, trusting the networks the
  # server is on: for pods of the test cluster (an address inside its
  # network namespace; run this script there), never a host address.
  local listen=""
  if [ -n "${PGLISTEN:-}" ]; then
    listen=$PGLISTEN
    echo "host all all samenet trust" >>"$dir/data/pg_hba.conf"
  fi
  as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-k $dir -p 5432 -c listen_addresses=$listen -c max_connections=300 -c shared_buffers=128MB" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  echo "export AGENTD_TEST_POSTGRES='postgres://postgres@/postgres?host=$dir&port=5432'"
  if [ -n "$listen" ]; then
    echo "export AGENTD_TEST_POSTGRES_TCP='postgres://postgres@$listen:5432/postgres?sslmode=disable'"
  fi
}

stop() {
  [ -f "$state" ] || return 0
  local dir bin
  dir=$(cat "$state")
  bin=$(bindir)
  if [ -d "$dir/data" ]; then
    as "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir" "$state"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/pg.sh start|stop" >&2; exit 2 ;;
esac
