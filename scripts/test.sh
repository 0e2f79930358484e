#!/usr/bin/env bash
# The stages of `make test` (and `make test-stress`): each stage is a make target, run whether or not an earlier
# one failed, so that one failing test does not hide what the others would say. Each records how it ended
# (scripts/stage.sh), and the run closes with the summary of cmd/testsummary -stages: a line per stage, each
# failed test with the first lines of its output, and a verdict naming the failures and the stages that did not
# run. Those are the last lines of the run.
# Usage: scripts/test.sh DIR NAME:TARGET[&]...
#   NAME:TARGET    run `make TARGET` as stage NAME, its output on the terminal
#   NAME:TARGET&   start it in the background, its output to DIR/NAME.log only, beside the stages after it;
#                  the run waits for it before the summary
# Exits 1 unless every stage passed (or skipped, saying why).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/test.sh DIR NAME:TARGET[&]...}
shift
rm -rf "$dir" && mkdir -p "$dir"
make=${MAKE:-make}
names=() bg=()
status=0
started=$(date +%s)
for s in "$@"; do
	name=${s%%:*} target=${s#*:}
	names+=("$name")
	if [[ $target == *'&' ]]; then
		scripts/stage.sh "$dir" "$name" --quiet "$make" --no-print-directory "${target%&}" &
		bg+=($!)
	else
		scripts/stage.sh "$dir" "$name" "$make" --no-print-directory "$target" || status=1
	fi
done
for pid in "${bg[@]}"; do
	wait "$pid" || status=1
done
echo "== all stages ended after $(($(date +%s) - started)) s"
out/testsummary -stages "$dir" "${names[@]}" || status=1
exit $status
