#!/usr/bin/env bash
# Runs a long step saying what it does before, and how long it took after, so that a quiet build never looks hung.
# Usage: scripts/timed.sh WHAT COMMAND [ARG...]      exits with COMMAND's status
what=${1:?usage: timed.sh WHAT COMMAND...}
shift
started=$(date +%s.%N)
echo "$what ..." >&2
"$@"
rc=$?
secs=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if ((rc)); then
	echo "$what: failed after $secs s" >&2
else
	echo "$what: done in $secs s" >&2
fi
exit "$rc"
