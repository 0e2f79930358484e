# Shared by the kernel VM's shell tests (lifecycle.sh, matrix.sh), which source it: busybox sh.

# poll SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds (return 0) or SECONDS have passed (1). TCG
# is slow: waits are seconds, not milliseconds.
poll() {
	local secs=$1 i=0
	shift
	while [ "$i" -lt "$((secs * 10))" ]; do
		"$@" && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# wait_exit PID SECONDS: until PID has exited.
wait_exit() { poll "$2" exited "$1"; }
exited() { ! kill -0 "$1" 2>/dev/null; }
