#!/usr/bin/env bash
# Kernel matrix: boot Debian's stock kernel (linux-image-amd64, where dummy, nf_tables, nft_ct, veth and
# ifb are modules) in QEMU and run the kernel tests of internal/link, internal/nft (nft/nftconn, nft/foreign and
# nft/nftwatch too) and internal/preflight inside it, so the production `dummy` path is tested although the
# development kernel lacks it.
#
# Usage: test/kernel/run.sh [--if-possible]
#   --if-possible   exit 0 with a message saying why when QEMU or the kernel cannot be installed (for `make test-ci`);
#                   ignored under CI=true, where the VM is required: CI must not be green without booting it
# Environment: KERNEL_TEST_RUN  -test.run pattern for the VM's test binaries (default: all tests)
#              KERNEL_VM_TIMEOUT seconds before QEMU is killed (default 900)
#              KERNEL_HOLD_BACK modules of test/kernel/modules.txt to leave out, as a distribution kernel built without
#                               them (nothing loads a module on demand in the VM): `nft_socket` stands for Azure
#                               Linux 3 x86_64, Flatcar and Talos before 1.14; `nft_ct` for a kernel without
#                               conntrack's expressions. Its own initramfs and log.
#
# What was learned trying this (see the issue): TCG only (no KVM here); boot the uncompressed kernel (skips ~5 s
# of emulated decompression); `-M microvm` hangs, the default machine works; nothing loads modules on demand in
# the initramfs, so they are loaded in dependency order by /init; judge by the marker /init prints, never by
# QEMU's exit code; strip the serial console's \r. no_timer_check: on a busy host the emulated guest is so slow
# that the kernel's boot check of the IO-APIC timer fails and it panics ("IO-APIC + timer doesn't work").
set -euo pipefail

cd "$(dirname "$0")/../.."
repo=$PWD
cache=$repo/.cache/kernel
marker="NODELOCALDNS-KERNEL-RESULT"
source scripts/optional-step.sh
source scripts/apt.sh
optional_step kernel "the VM" "$@"
started=$(date +%s.%N)
# variant names the files of a boot with modules held back: initramfs-without-nft_socket.cpio, vm-....log
variant=${KERNEL_HOLD_BACK:+-without-${KERNEL_HOLD_BACK// /-}}


# --- host tools -------------------------------------------------------------------------------------------
# command -> Debian package. busybox must be the static build: it is the VM's only userland besides the
# binaries copied with their libraries below.
declare -A tools=(
	[qemu-system-x86_64]=qemu-system-x86 [depmod]=kmod [cpio]=cpio [xz]=xz-utils [dpkg-deb]=dpkg
	[ip]=iproute2 [nft]=nftables [conntrack]=conntrack [dig]=bind9-dnsutils [xtables-nft-multi]=iptables
	[ipvsadm]=ipvsadm [ethtool]=ethtool
)
install_tools() {
	local missing=()
	for cmd in "${!tools[@]}"; do
		command -v "$cmd" >/dev/null || missing+=("${tools[$cmd]}")
	done
	[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || missing+=(busybox-static)
	((${#missing[@]} == 0)) && return 0
	log "installing ${missing[*]}"
	[[ $(id -u) == 0 ]] || skip_or_fail "need root to apt-get install ${missing[*]}"
	# The wait's messages on the terminal, apt-get's own in the log.
	apt_wait_locks || skip_or_fail "cannot install ${missing[*]}: the package system is locked (above)"
	apt_get install -y -qq --no-install-recommends "${missing[@]}" >"$cache/apt.log" 2>&1 ||
		{ apt_get update -qq >>"$cache/apt.log" 2>&1 &&
			apt_get install -y -qq --no-install-recommends "${missing[@]}" >>"$cache/apt.log" 2>&1; } ||
		skip_or_fail "cannot install ${missing[*]} (see $cache/apt.log)"
}

# --- kernel -----------------------------------------------------------------------------------------------
# kernel_package sets pkg to the real package behind the linux-image-amd64 metapackage: security updates rename
# it (linux-image-6.1.0-NN-amd64), so the name is never hard-coded.
kernel_package() {
	local q='/Depends: linux-image-[0-9]/ { print $2; exit }'
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk "$q")
	if [[ -z $pkg ]]; then
		apt_wait_locks || true
		apt_get update -qq >>"$cache/apt.log" 2>&1 || true
		pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk "$q")
	fi
	[[ -n $pkg ]] || skip_or_fail "cannot resolve linux-image-amd64 with apt-cache"
}

# extract_vmlinux finds the compressed payload inside a bzImage and decompresses it (like the kernel tree's
# scripts/extract-vmlinux): QEMU boots the resulting ELF through its PVH entry point (CONFIG_PVH=y).
extract_vmlinux() {
	local bz=$1 out=$2 magic decomp off
	for pair in 'FD377A585A00 xz -dcq --single-stream' '28B52FFD zstd -dcq' '1F8B08 gzip -dcq'; do
		read -r magic decomp <<<"$pair"
		command -v "${decomp%% *}" >/dev/null || continue
		for off in $(LC_ALL=C grep -obUaP "$(sed 's/../\\x&/g' <<<"$magic")" "$bz" | cut -d: -f1); do
			tail -c "+$((off + 1))" "$bz" | $decomp >"$out" 2>/dev/null || true
			[[ $(head -c 4 "$out" | od -An -tx1 | tr -d ' ') == 7f454c46 ]] && return 0
		done
	done
	return 1
}

# unpack_kernel downloads the package (apt-get download, not install: installing pulls in a large stack and
# builds an initrd we do not need), unpacks it, runs depmod on it and extracts vmlinux, once per version; sets
# kdir (the unpacked package) and ver (its kernel release).
unpack_kernel() {
	local dir=$cache/$pkg
	if [[ ! -f $dir/.done ]]; then
		log "downloading and unpacking $pkg"
		rm -rf "$dir" && mkdir -p "$dir/deb"
		(cd "$dir/deb" && apt_get download "$pkg" >"$dir/download.log" 2>&1) ||
			skip_or_fail "apt-get download $pkg failed (see $dir/download.log)"
		dpkg-deb -x "$dir"/deb/*.deb "$dir/root" && rm -rf "$dir/deb"
		local release
		release=$(ls "$dir/root/lib/modules")
		depmod -b "$dir/root" "$release"
		extract_vmlinux "$dir/root/boot/vmlinuz-$release" "$dir/vmlinux" ||
			skip_or_fail "cannot extract vmlinux from $pkg"
		echo "$release" >"$dir/.done"
	fi
	kdir=$dir
	ver=$(cat "$dir/.done")
}

# --- initramfs --------------------------------------------------------------------------------------------
# copy_libs copies the shared libraries that ldd names for the given programs into the initramfs, under usr/
# (lib and lib64 are symlinks to usr/lib*, as on a merged-/usr Debian). One ldd call for all of them: ldd is slow
# on a busy machine.
copy_libs() {
	local root=$1 lib
	shift
	for lib in $(ldd "$@" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }' | sort -u); do
		[[ -e $root/usr${lib#/usr} ]] || install -D -m 0755 "$lib" "$root/usr${lib#/usr}"
	done
}

# build_initramfs writes $initramfs for the kernel in $kdir.
build_initramfs() {
	local root=$cache/initramfs$variant
	rm -rf "$root" && mkdir -p "$root"/{bin,usr/bin,usr/sbin,usr/lib,usr/lib64,proc,sys,dev,tests,src,etc}
	ln -s usr/lib "$root/lib" && ln -s usr/lib64 "$root/lib64" && ln -s usr/sbin "$root/sbin"

	# busybox for the shell and coreutils; iproute2, nft, conntrack, dig, iptables-nft, ipvsadm and ethtool are the real
	# ones, as the tests use them as independent observers or kube-proxy stand-ins (busybox's ip has no JSON output).
	install -m 0755 /bin/busybox "$root/bin/busybox"
	for app in $(/bin/busybox --list); do
		[[ -e $root/bin/$app ]] || ln -s busybox "$root/bin/$app"
	done
	local prog progs=() xt=/usr/lib/x86_64-linux-gnu/xtables
	for prog in ip nft conntrack xtables-nft-multi ipvsadm ethtool; do
		progs+=("$(command -v "$prog")")
		install -m 0755 "${progs[-1]}" "$root/usr/sbin/$prog"
	done
	progs+=("$(command -v dig)")
	install -m 0755 "${progs[-1]}" "$root/usr/bin/dig"
	for prog in iptables ip6tables iptables-save iptables-restore ip6tables-save ip6tables-restore; do
		ln -s xtables-nft-multi "$root/usr/sbin/$prog"
	done
	# iptables loads its match and target extensions with dlopen, so ldd of the binary does not name them.
	mkdir -p "$root$xt" && cp "$xt"/*.so "$root$xt/"
	copy_libs "$root" "${progs[@]}" "$xt"/*.so
	echo "nameserver 127.0.0.1" >"$root/etc/resolv.conf"
	printf 'root:x:0:0:root:/tmp:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"

	# Modules in dependency order: modprobe resolves them against the depmod'ed tree, /init insmods the list.
	local mod line path
	local -A seen=()
	: >"$root/modules.order"
	for mod in $(grep -v '^#' test/kernel/modules.txt); do
		[[ " ${KERNEL_HOLD_BACK:-} " == *" $mod "* ]] && continue
		modprobe -d "$kdir/root" -S "$ver" --show-depends "$mod" >"$cache/deps.tmp" ||
			{ log "error: module $mod not in $ver"; exit 1; }
		while read -r line; do
			[[ $line == insmod* ]] || continue
			path=$(awk '{ print $2 }' <<<"$line")
			[[ -n ${seen[$path]:-} ]] && continue
			seen[$path]=1
			install -D -m 0644 "$path" "$root${path#"$kdir/root"}"
			echo "${path#"$kdir/root"} $(cut -d' ' -f3- <<<"$line")" >>"$root/modules.order"
		done <"$cache/deps.tmp"
	done
	rm -f "$cache/deps.tmp"
	sed -i 's/ $//' "$root/modules.order"

	# Static test binaries (no libc in the VM for them), run from their package directory with its testdata/
	# beside them, so the goldens resolve.
	local dir
	: >"$root/tests/list"
	for dir in internal/link internal/nft internal/nft/nftconn internal/nft/foreign internal/nft/nftwatch internal/preflight; do
		CGO_ENABLED=0 go test -c -o "$root/tests/${dir##*/}.test" "./$dir"
		mkdir -p "$root/src/$dir"
		echo "$dir ${dir##*/}.test" >>"$root/tests/list"
		if [[ -d $dir/testdata ]]; then cp -r "$dir/testdata" "$root/src/$dir/testdata"; fi
	done
	# The real binary and its lifecycle smoke test.
	CGO_ENABLED=0 go build -o "$root/usr/bin/nodelocaldns" ./cmd/nodelocaldns
	install -m 0755 test/kernel/lifecycle.sh "$root/tests/lifecycle.sh"
	install -m 0755 test/kernel/matrix.sh "$root/tests/matrix.sh"
	install -m 0644 test/kernel/vmlib.sh "$root/tests/vmlib.sh"
	echo "${KERNEL_TEST_RUN:+-test.run=$KERNEL_TEST_RUN}" >"$root/tests/args"
	echo "${KERNEL_HOLD_BACK:-}" >"$root/tests/held-back"
	install -m 0755 test/kernel/init.sh "$root/init"

	# Uncompressed: decompressing in emulation costs more than reading the bigger image.
	(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) >"$initramfs"
}

# --- boot -------------------------------------------------------------------------------------------------
main() {
	mkdir -p "$cache"
	install_tools
	local pkg kdir ver initramfs=$cache/initramfs$variant.cpio
	log "host tools ready after $(elapsed "$started") s"
	kernel_package
	unpack_kernel
	log "kernel $pkg ready after $(elapsed "$started") s; building initramfs for $ver"
	build_initramfs
	log "initramfs $(du -h "$initramfs" | cut -f1), ready after $(elapsed "$started") s; booting"

	local booted vmlog=$cache/vm$variant.log status
	booted=$(date +%s.%N)
	set +e
	timeout -k 10 "${KERNEL_VM_TIMEOUT:-900}" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 1024 \
		-nodefaults -display none -serial stdio -no-reboot \
		-kernel "$kdir/vmlinux" -initrd "$initramfs" \
		-append "console=ttyS0 panic=-1 loglevel=4 no_timer_check rdinit=/init" </dev/null | tr -d '\r' >"$vmlog"
	status=${PIPESTATUS[0]}
	# The full serial log (test output with rulesets: hundreds of KiB) stays in the file; the terminal gets the
	# VM's own lines, each package's result, the failures and the lifecycle steps.
	log "full log: $vmlog"
	grep -E '^(kernel-vm:|lifecycle:|matrix:|PASS$|FAIL|--- FAIL|panic:|NODELOCALDNS-KERNEL-RESULT)' "$vmlog" | sed 's/^/  /' || true
	set -e
	local vmtime
	vmtime=$(elapsed "$booted")
	# Summary of top-level tests, in the plain closing-line form.
	local passed failed skipped
	passed=$(grep -c '^--- PASS' "$vmlog" || true)
	failed=$(grep -c '^--- FAIL' "$vmlog" || true)
	skipped=$(grep -c '^--- SKIP' "$vmlog" || true)
	log "$pkg${KERNEL_HOLD_BACK:+ without $KERNEL_HOLD_BACK}: VM ran ${vmtime} s (qemu exit $status), total wall time $(elapsed "$started") s"
	if grep -q "^$marker rc=0$" "$vmlog"; then
		echo "kernel-vm${variant}: $passed passed, $failed failed, $skipped skipped"
		return 0
	fi
	if ((status == 124 || status == 137)); then
		log "error: VM timed out after ${KERNEL_VM_TIMEOUT:-900} s"
	elif ! grep -q "^$marker" "$vmlog"; then
		log "error: no result marker (guest panic or crash? see $vmlog)"
	fi
	log "last lines of $vmlog:"
	tail -n 40 "$vmlog" | sed 's/^/  /' >&2
	failed_output "$vmlog" >&2
	record_failures "$vmlog"
	echo "kernel-vm${variant}: $passed passed, $((failed > 0 ? failed : 1)) failed, $skipped skipped"
	return 1
}

# failed_output prints each failed test's own lines from a VM log (go test -v: from its "=== RUN" to its
# "--- FAIL"), at most 30 of each, so that a failure in the middle of the run is on the terminal, not only in
# the file, and last.
failed_output() {
	awk '
		/^=== RUN   / { name = $3; n = 0; delete buf }
		{ buf[n++ % 30] = $0 }
		/^ *--- FAIL: / {
			print "  output of " $3 " (its last lines):"
			for (i = (n > 30 ? n - 30 : 0); i < n; i++) print "    " buf[i % 30]
		}
	' "$1"
}

# record_failures adds this boot's failures to the stage's failures file (STAGE_FAILURES, set by scripts/stage.sh),
# in cmd/testsummary's form, so that the run's closing summary names them with their lines: each failed test,
# or, when none did (the lifecycle script, a panic, a timeout), the boot with the shell tests' FAIL lines and the
# end of its log.
record_failures() {
	[[ -n ${STAGE_FAILURES:-} ]] || return 0
	local where="the kernel VM${KERNEL_HOLD_BACK:+ without $KERNEL_HOLD_BACK}"
	if grep -q '^--- FAIL' "$1"; then
		failed_output "$1" | awk -v where="$where" '
			/^  output of / { name = $3; sub(/^  output of [^ ]+ \(its last lines\):/, ""); print "--- FAIL: " name " in " where; next }
			{ print }'
	else
		# The shell tests' own FAIL lines first (they come before the agents' logs those tests print on failure,
		# which would fill the tail), then the end of the log.
		echo "--- FAIL: boot in $where"
		grep -E '^(lifecycle|matrix): FAIL' "$1" | head -n 10 | sed 's/^/    /'
		tail -n 20 "$1" | sed 's/^/    /'
	fi >>"$STAGE_FAILURES"
}

main
