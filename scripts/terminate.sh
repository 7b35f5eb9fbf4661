# Sourced by the scripts that run a throwaway server (s3.sh, nats.sh).

# terminate PID TRIES: SIGTERM, then up to TRIES × 50 ms for the process to
# end, then SIGKILL. Nothing when it is not running.
terminate() {
  local pid=$1 tries=$2
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 "$tries"); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null || true
}
