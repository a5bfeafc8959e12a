#!/usr/bin/env bash
# Run a command and start it again whenever it exits (a crash, an unrecoverable broker error), as a process
# supervisor would; TERM or INT stops the command and this loop. Used by `make dev` for every long-lived process.
# Usage: supervise.sh <name> <command> [args...]
name=$1
shift
stop() {
  trap - TERM INT
  # Every background job of this loop (the command, or the pause before starting it again), read from the shell's
  # job table: a TERM that lands just after `"$@" &` runs this trap before the next line, and a PID kept from `$!`
  # would not be known yet (the command was then left running).
  local jobs
  jobs=$(jobs -p)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086 # one PID a word
    kill -TERM $jobs 2>/dev/null
    wait $jobs 2>/dev/null
  fi
  exit 0
}
trap stop TERM INT
while :; do
  "$@" &
  wait $!
  status=$?
  echo "[supervise] $name exited with status $status; starting it again in 1 s"
  sleep 1 &
  wait $!
done
