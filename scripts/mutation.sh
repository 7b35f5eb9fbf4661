#!/usr/bin/env bash
# Mutation testing of the core packages with gremlins (pinned in
# scripts/tools.env): each package's own tests against small planted bugs
# in its code (docs/mutation.md). Per package it prints killed, survived
# (lived), not covered, timed out and the efficacy (killed / (killed +
# survived)), and fails when the efficacy is under the package's floor.
#
#   scripts/mutation.sh                  every core package: the files below
#   scripts/mutation.sh eventlog sqlite  the named ones (names as below)
#   scripts/mutation.sh --full [name…]   every file of the packages (hours)
#   scripts/mutation.sh --dry-run […]    count the mutants, test nothing
#   scripts/mutation.sh --ci             what CI runs: the core packages
#                                        changed in the last commits, else a
#                                        small fixed sample, within a budget
#
# Environment:
#   AGENTD_MUTATION_BUDGET   --ci: seconds for the whole step (default 300);
#                            a package whose measured run does not fit in
#                            what is left is not started, one that overruns
#                            is stopped and reported as such (not a failure)
#   AGENTD_MUTATION_BASE     --ci: the commit to compare with (default: the
#                            last AGENTD_MUTATION_COMMITS commits, 10)
#   AGENTD_MUTATION_OUT      folder for gremlins' JSON results (default: a
#                            temporary one, removed at exit)
#   AGENTD_MUTATION_TIMEOUT_COEFFICIENT  gremlins' timeout coefficient: a
#                            mutant's test run may take this many times the
#                            package's coverage run (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/tools.env

# One line a package, fields separated by spaces: name, directory, files
# mutated (a regexp on the file name; subfolders are never mutated: they
# are packages of their own), floor (% efficacy), seconds a full run took
# (docs/mutation.md; --ci uses it to plan), and GOFLAGS for its go test
# runs, if any (tests left out: docs/mutation.md says why).
packages=(
  "eventlog internal/eventlog (eventlog|subscribe)\.go 68 2908"
  "conversation conversation .* 93 53"
  "session internal/session (permissions|state|turnend)\.go 68 476"
  "api internal/api (errors|identity)\.go 79 1827"
  "auth internal/auth (service|keys|token)\.go 91 25"
  "modelproxy internal/modelproxy (providers|tokens)\.go 88 245 -skip=^TestE2E"
  "sandbox sandbox path\.go 100 2"
  "sqlite store/sqlite seqs\.go 77 33"
)
# --ci with no core package changed: these, so the step still proves the
# tool and the floors work.
sample=(sandbox auth sqlite)

ci=false
full=false
dry=()
want=()
for a in "$@"; do
  case $a in
    --ci) ci=true ;;
    --dry-run) dry=(-d) ;;
    --full) full=true ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) want+=("$a") ;;
  esac
done
budget=${AGENTD_MUTATION_BUDGET:-300}
coef=${AGENTD_MUTATION_TIMEOUT_COEFFICIENT:-3}

field() { local f; read -r -a f <<<"$1"; echo "${f[$2]:-}"; }
lookup() {
  local p
  for p in "${packages[@]}"; do [ "$(field "$p" 0)" = "$1" ] && { echo "$p"; return; }; done
  echo "unknown package $1 (known: $(for p in "${packages[@]}"; do printf '%s ' "$(field "$p" 0)"; done))" >&2
  exit 2
}

if $ci; then
  # Changed files: against AGENTD_MUTATION_BASE, else the last N commits
  # (a plain `git clone` has them; a shallow one may not, then the sample
  # runs), plus what is not committed yet.
  base=${AGENTD_MUTATION_BASE:-}
  if [ -z "$base" ]; then
    n=${AGENTD_MUTATION_COMMITS:-10}
    base=$(git rev-parse -q --verify "HEAD~$n" 2>/dev/null || true)
  fi
  changed=()
  if [ -n "$base" ] && git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    mapfile -t changed < <({ git diff --name-only "$base" -- '*.go'; git ls-files -o --exclude-standard -- '*.go'; } | sort -u)
    echo "changed Go files since $(git rev-parse --short "$base"): ${#changed[@]}"
  else
    echo "no base commit to compare with (shallow clone?): running the sample"
  fi
  for p in "${packages[@]}"; do
    dir=$(field "$p" 1) files=$(field "$p" 2)
    for f in "${changed[@]}"; do
      # A change in the package's mutated files or in its tests counts.
      if [ "$(dirname "$f")" = "$dir" ] && [[ $(basename "$f") =~ ^($files|.*_test\.go)$ ]]; then
        want+=("$(field "$p" 0)")
        break
      fi
    done
  done
  if [ ${#want[@]} -eq 0 ]; then
    echo "no core package changed: running the sample (${sample[*]})"
    want=("${sample[@]}")
  fi
elif [ ${#want[@]} -eq 0 ]; then
  for p in "${packages[@]}"; do want+=("$(field "$p" 0)"); done
fi

start=$(date +%s)
# gremlins copies the whole module for its workers: give it a copy of the
# files git knows (not node_modules, bin, caches), with a fresh web/dist.
work=$(mktemp -d /tmp/agentd-mutation.XXXXXX)
out=${AGENTD_MUTATION_OUT:-$work/out}
mkdir -p "$out"
trap 'rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src"
git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$src"
# gremlins puts its work folders under TMPDIR.
export TMPDIR=$work
# Built once (go run would stand between the budget's signal and it).
GOBIN=$work/bin go install "$GREMLINS"
# -trimpath (below): the build cache then does not key on the folder, so
# gremlins' copy of the module reuses what the coverage run compiled.
# The real agent CLIs are not in the copy; their tests skip.
unset AGENTD_REQUIRE_AGENTS

failed=()
rows=()
for name in "${want[@]}"; do
  p=$(lookup "$name")
  dir=$(field "$p" 1) files=$(field "$p" 2) floor=$(field "$p" 3) took=$(field "$p" 4) goflags=$(field "$p" 5)
  if $full; then files='.*'; fi
  left=$((budget - ($(date +%s) - start)))
  limit=()
  if $ci; then
    if [ "$left" -le 0 ] || [ "$took" -gt "$left" ]; then
      echo "== $name: a full run took ${took}s, $((left > 0 ? left : 0))s of the budget left: not run"
      rows+=("$(printf '%-13s %s' "$name" "not run (budget)")")
      continue
    fi
    # At the budget gremlins and its go test runs (timeout's process
    # group) are killed: a stopped run has no result to keep.
    limit=(timeout -s KILL "$left")
  fi
  # Exclude every file but the mutated ones, and every subfolder.
  excl=(--exclude-files '/')
  while IFS= read -r f; do
    [[ $f =~ ^($files)$ ]] || excl+=(--exclude-files "^$(sed 's/\./\\./g' <<<"$f")\$")
  done < <(cd "$src/$dir" && ls -- *.go | grep -v '_test\.go$')
  echo "== $name ($dir: $files), floor ${floor}%"
  t0=$(date +%s)
  rc=0
  (cd "$src" && GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath${goflags:+ $goflags}" "${limit[@]}" "$work/bin/gremlins" unleash "./$dir" \
    "${dry[@]}" --workers 1 --timeout-coefficient "$coef" \
    "${excl[@]}" -o "$out/$name.json") || rc=$?
  secs=$(($(date +%s) - t0))
  if [ ! -s "$out/$name.json" ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "== $name: stopped at the budget after ${secs}s"
      rows+=("$(printf '%-13s %s' "$name" "stopped at the budget after ${secs}s")")
    else
      echo "== $name: gremlins failed (exit $rc)"
      failed+=("$name")
      rows+=("$(printf '%-13s %s' "$name" "gremlins failed (exit $rc)")")
    fi
    continue
  fi
  # Count the statuses from the JSON (its summary has no timed out).
  read -r killed lived notcov timedout notviable runnable < <(
    go run ./scripts/mutation/count.go "$out/$name.json")
  if [ ${#dry[@]} -gt 0 ]; then
    rows+=("$(printf '%-13s dry run: %s covered, %s not covered mutants; %ss' "$name" "$runnable" "$notcov" "$secs")")
    continue
  fi
  eff=0
  [ $((killed + lived)) -gt 0 ] && eff=$((killed * 1000 / (killed + lived)))
  verdict=ok
  if [ "$eff" -lt $((floor * 10)) ]; then verdict="UNDER THE FLOOR"; failed+=("$name"); fi
  rows+=("$(printf '%-13s %6s %8s %11s %9s %10s %8s.%s%% %5s%% %6ss  %s' "$name" "$killed" "$lived" \
    "$notcov" "$timedout" "$notviable" $((eff / 10)) $((eff % 10)) "$floor" "$secs" "$verdict")")
done

echo
printf '%-13s %6s %8s %11s %9s %10s %10s %6s %7s\n' package killed survived "not covered" "timed out" "not viable" efficacy floor time
printf '%s\n' "${rows[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "mutation testing FAILED: ${failed[*]}"
  exit 1
fi
