#!/usr/bin/env bash
# The stages of `make test` (and `make test-stress`): each stage is a make target, run whether or not an earlier
# one failed, so that one failing test does not hide what the others would say. Each records how it ended
# (scripts/stage.sh), and the run closes with the summary of cmd/testsummary -stages: a line per stage, each
# failed test with the first lines of its output, and a verdict naming the failures and the stages that did not
# run. Those are the last lines of the run (and DIR/summary.txt).
# Usage: scripts/test.sh DIR NAME:TARGET[&]...
#   NAME:TARGET    run `make TARGET` as stage NAME, its output on the terminal
#   NAME:TARGET&   a background stage: all of them run one after another in a second lane, started first, beside
#                  the foreground stages; their output goes to DIR/NAME.log, the terminal gets a line as each
#                  starts and ends. The run waits for the lane before the summary.
# Exits 1 unless every stage passed (or skipped, saying why).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/test.sh DIR NAME:TARGET[&]...}
shift
rm -rf "$dir" && mkdir -p "$dir"
make=${MAKE:-make}
names=() fg=() bg=()
for s in "$@"; do
	names+=("${s%%:*}")
	if [[ $s == *'&' ]]; then bg+=("${s%&}"); else fg+=("$s"); fi
done
started=$(date +%s)
lane=
if ((${#bg[@]})); then
	(
		for s in "${bg[@]}"; do
			scripts/stage.sh "$dir" "${s%%:*}" --quiet "$make" --no-print-directory "${s#*:}"
		done
	) &
	lane=$!
fi
for s in "${fg[@]}"; do
	scripts/stage.sh "$dir" "${s%%:*}" "$make" --no-print-directory "${s#*:}"
done
if [[ -n $lane ]]; then
	echo "== waiting for the background stages (${bg[*]%%:*})"
	wait "$lane"
fi
echo "== all stages ended after $(($(date +%s) - started)) s"
# The summary is also kept in DIR/summary.txt: .ci/run prints it again at its very end, after the cluster suite's
# half hour of output, where a reader of CI's log looks first.
out/testsummary -stages "$dir" "${names[@]}" | tee "$dir/summary.txt"
exit "${PIPESTATUS[0]}"
