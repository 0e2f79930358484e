#!/usr/bin/env bash
# Runs a command beside a CPU hog: HOG_WORKERS (default 2) stress-ng workers spinning, so that the command gets
# about half of a 2-core machine, as on a busy CI runner or a laptop doing other work. `make test-stress` runs the
# suite so: a test whose verdict depends on the machine's speed fails here before it fails a user.
# Usage: scripts/with-cpu-hog.sh COMMAND [ARG...]    exits with COMMAND's status
# HOG_TIMEOUT (default 90m) bounds the hog should this script die without stopping it.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${HOG_WORKERS:-2}
command -v stress-ng >/dev/null || scripts/deps.sh stress >&2
stress-ng --cpu "$workers" --timeout "${HOG_TIMEOUT:-90m}" --quiet &
hog=$!
# SIGTERM to stress-ng's parent stops its workers too.
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT
echo "cpu hog: $workers stress-ng workers (pid $hog) beside: $*" >&2
"$@"
