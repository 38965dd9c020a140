#!/bin/sh
# Start one toolserver replica: the container's entrypoint, and the same start-up outside Docker
# (tests/test_scaleout.py starts its replicas with this script). Settings come from TOOLSERVER_*
# variables; extra arguments go to `toolserver serve`.
set -eu

# The official weights come with the package (toolserver/sr/smfanet); a host with network access may fetch them
# into another mounted directory now (TOOLSERVER_SR_MODEL_DIR).
if [ "${TOOLSERVER_FETCH_WEIGHTS:-0}" = "1" ]; then
  export TOOLSERVER_SR_MODEL_DIR="${TOOLSERVER_SR_MODEL_DIR:-/models/smfanet}"
  toolserver weights download --dir "$TOOLSERVER_SR_MODEL_DIR" \
    || echo "toolserver: could not fetch SMFANet weights; super-resolution stays unavailable" >&2
fi

# Two glibc malloc arenas instead of one per thread: under a 64-client soak the resident memory stops
# creeping upward (BENCHMARKS.md, "Load and soak"), at no cost in throughput.
export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"

# exec: the server is PID 1 in a container and receives SIGTERM itself (graceful drain).
exec toolserver serve "$@"
