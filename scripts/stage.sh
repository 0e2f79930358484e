#!/usr/bin/env bash
# Runs one stage of `make test` (or test-ci, test-stress) and records how it ended, for the closing summary (cmd/testsummary -stages).
# Usage: scripts/stage.sh DIR NAME [--quiet] COMMAND [ARG...]
#   COMMAND's output goes to the terminal and to DIR/NAME.log (--quiet: to the log only, for a stage that runs
#   beside another; the terminal gets its start and end lines). DIR/NAME.status gets "ok|FAIL|skip SECONDS" when
#   it ends. COMMAND finds in its environment STAGE_FAILURES (DIR/NAME.failures, for `testsummary -failures`) and
#   STAGE_SKIP (DIR/NAME.skip: a step that skips writes why there, scripts/optional-step.sh).
# Exits with COMMAND's status.
set -uo pipefail
dir=${1:?usage: stage.sh DIR NAME [--quiet] COMMAND...} name=${2:?}
shift 2
quiet=false
[[ ${1:-} == --quiet ]] && { quiet=true; shift; }
mkdir -p "$dir"
rm -f "$dir/$name".{status,log,failures,skip}
export STAGE_FAILURES=$dir/$name.failures STAGE_SKIP=$dir/$name.skip
started=$(date +%s.%N)
if $quiet; then
	echo "== $name: started, beside the other stages: $* (output in $dir/$name.log)"
	"$@" >"$dir/$name.log" 2>&1
	rc=$?
else
	echo "== $name: $*"
	"$@" 2>&1 | tee "$dir/$name.log"
	rc=${PIPESTATUS[0]}
fi
secs=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
result=ok
if ((rc)); then
	result=FAIL
elif [[ -s $STAGE_SKIP ]]; then
	result=skip
fi
echo "$result $secs" >"$dir/$name.status"
echo "== $name: $result after $secs s"
exit "$rc"
