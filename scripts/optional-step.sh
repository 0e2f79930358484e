# Sourced by the steps `make test-ci` runs where the machine allows (test/kernel/run.sh: the kernel VM;
# scripts/test-arm64.sh: the emulated arm64 run): the --if-possible flag, which CI=true overrides (CI must not be
# green without the step), and how such a step logs, times itself and gives up.
#   optional_step NAME WHAT "$@"   NAME prefixes every line ("kernel: ..."); WHAT is what CI requires
optional_step() {
	step_name=$1
	if_possible=false
	[[ ${3:-} == --if-possible ]] && if_possible=true
	if $if_possible && [[ ${CI:-} == true ]]; then
		echo "$step_name: CI=true: $2 is required (--if-possible ignored)" >&2
		if_possible=false
	fi
}

log() { echo "$step_name: $*" >&2; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# skip_or_fail explains why the step cannot run: a skip under --if-possible, else a failure.
skip_or_fail() {
	if $if_possible; then
		log "skipped: $*"
		# scripts/stage.sh: the closing summary of `make test-ci` says the stage skipped, and why.
		[[ -n ${STAGE_SKIP:-} ]] && echo "$step_name: $*" >>"$STAGE_SKIP"
		exit 0
	fi
	log "error: $*"
	exit 1
}
