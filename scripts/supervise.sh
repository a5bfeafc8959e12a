#!/usr/bin/env bash
# Run a command and start it again whenever it exits (a crash, an unrecoverable broker error), as a process
# supervisor would; TERM or INT stops the command and this loop. Used by `make dev` for every long-lived process.
# Usage: supervise.sh <name> <command> [args...]
name=$1
shift
child=0
stop() {
  trap - TERM INT
  if [ "$child" -gt 0 ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  exit 0
}
trap stop TERM INT
while :; do
  "$@" &
  child=$!
  wait "$child"
  status=$?
  echo "[supervise] $name exited with status $status; starting it again in 1 s"
  sleep 1 &
  wait $!
done
