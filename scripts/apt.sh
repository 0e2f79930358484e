# Sourced by every install step that runs apt-get (scripts/deps.sh, test/kernel/run.sh, test/cluster/*.sh).
# A fresh Debian machine runs unattended-upgrades soon after boot, and a user may have an apt-get of their own
# running: apt-get then fails at once ("Could not get lock /var/lib/dpkg/lock-frontend", exit 100). apt_get waits
# instead, up to APT_LOCK_TIMEOUT seconds, for every lock of the package system to be free, saying what it waits
# for, and then fails naming the holder. Both kinds of lock count: apt and dpkg take POSIX (fcntl) locks, a
# `flock` on the same file is a flock(2) lock; /proc/locks lists both.
#   apt_get ARG...        apt-get ARG... once the locks are free (DEBIAN_FRONTEND=noninteractive)
#   apt_wait_locks        only the wait: for a caller that sends apt-get's own output to a log
# APT_LOCK_FILES overrides the files watched (tests point it at files of their own).
APT_LOCK_TIMEOUT=${APT_LOCK_TIMEOUT:-300}
APT_LOCK_FILES=${APT_LOCK_FILES:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}

# apt_lock_holders prints "COMMAND (pid N) holds FILE" for each lock held on APT_LOCK_FILES, nothing when all are
# free. /proc/locks names a file by device (the kernel's major:minor, in hex) and inode; waiters ("->") hold nothing.
apt_lock_holders() {
	local f d id pid
	for f in $APT_LOCK_FILES; do
		[[ -e $f ]] || continue
		d=$(stat -c %d "$f")
		id=$(printf '%02x:%02x:%d' $(((d & 0xfff00) >> 8)) $(((d & 0xff) | ((d >> 12) & 0xfff00))) "$(stat -c %i "$f")")
		for pid in $(awk -v id="$id" '$2 != "->" && $6 == id { print $5 }' /proc/locks); do
			echo "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80 || echo '?')(pid $pid) holds $f"
		done
	done
}

apt_wait_locks() {
	local deadline=$((SECONDS + APT_LOCK_TIMEOUT)) holders said=false
	while holders=$(apt_lock_holders) && [[ -n $holders ]]; do
		if ((SECONDS >= deadline)); then
			echo "apt: the package system is still locked after ${APT_LOCK_TIMEOUT} s: ${holders//$'\n'/; }." \
				"Let it finish (unattended-upgrades does, in minutes) or stop it, then run this again." >&2
			return 1
		fi
		$said || echo "apt: waiting up to ${APT_LOCK_TIMEOUT} s for the package system's lock: ${holders//$'\n'/; }" >&2
		said=true
		sleep 1
	done
	$said && echo "apt: the lock is free after $((SECONDS + APT_LOCK_TIMEOUT - deadline)) s" >&2
	return 0
}

# apt_get also gives apt-get the same bound for the locks it takes itself: a holder that starts between the wait
# and apt-get's own locking is waited for by apt-get (which names it if it gives up).
apt_get() {
	apt_wait_locks || return 1
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@"
}
