#!/usr/bin/env bash
# The arm64 build under user-mode emulation: qemu-aarch64, from Debian's qemu-user (scripts/deps.sh
# arm64), runs the unit tests of ARM64_PKGS built with GOARCH=arm64, then the image's real arm64 binary once:
# -version, and -print-rules with the standard manifest's flags, whose ruleset must be the host binary's, byte for
# byte. `go test -exec` names the emulator, so nothing is registered with the host's binfmt_misc.
#
# Usage: scripts/test-arm64.sh [--if-possible]
#   --if-possible   exit 0 with a message saying why when qemu-aarch64 cannot be installed (for `make test-ci`);
#                   ignored under CI=true, where the emulated run is required: CI must not be green without it
# Environment: ARM64_PKGS  packages whose tests run (default ./cmd/... ./internal/...)
#              ARM64_SKIP  -skip pattern for tests that need what qemu-user does not emulate (top Makefile)
#
# Kernel tests skip: NODELOCALDNS_TEST_EMULATOR tells internal/testenv that there are no network namespaces and
# no nftables netlink here. As root the run is inside a throwaway network namespace with loopback up anyway, so
# that no test can reach the host's links or firewall even by mistake.
set -euo pipefail

cd "$(dirname "$0")/.."
source scripts/optional-step.sh
optional_step arm64 qemu-aarch64 "$@"
pkgs=${ARM64_PKGS:-./cmd/... ./internal/...}
skip=${ARM64_SKIP:-}
out=out/test-arm64
emu=qemu-aarch64


# have_emu: the emulator is on PATH and runs (not merely named).
have_emu() { $emu --version >/dev/null 2>&1; }
if ! have_emu; then
	[[ $(id -u) == 0 ]] || skip_or_fail "$emu not found, and installing qemu-user needs root"
	scripts/deps.sh arm64 >&2 || skip_or_fail "cannot install qemu-user (scripts/deps.sh arm64)"
	have_emu || skip_or_fail "qemu-user is installed but $emu does not run"
fi

netns=()
if [[ $(id -u) == 0 ]]; then
	netns=(unshare --net sh -c 'ip link set lo up && exec "$@"' sh)
fi

started=$(date +%s.%N)
# shellcheck disable=SC2086 # pkgs is a list of patterns
# Through cmd/testsummary (built by the Makefile) when there: the failures go to the closing summary of `make test-ci`.
# The kernel tests all skip here, so their skips are only counted.
if [[ -x out/testsummary ]]; then
	GOARCH=arm64 NODELOCALDNS_TEST_EMULATOR=$emu "${netns[@]}" go test -json -count=1 -exec $emu -skip "$skip" $pkgs 2>&1 |
		out/testsummary -skips=false -failures "${STAGE_FAILURES:-}"
else
	GOARCH=arm64 NODELOCALDNS_TEST_EMULATOR=$emu "${netns[@]}" go test -count=1 -exec $emu -skip "$skip" $pkgs
fi
log "unit tests under $emu: $(elapsed "$started") s"

# The binaries of `make image`: the same flags, the same archive.
started=$(date +%s.%N)
rm -rf $out && mkdir -p $out
make --no-print-directory -f deploy/deploy.mk image IMAGE_OUT=$out IMAGE_VERSION=test-arm64 >$out/make-image.log 2>&1 ||
	{ cat $out/make-image.log >&2; log "error: make image failed"; exit 1; }
arm=$out/linux-arm64/nodelocaldns
version=$($emu $arm -version 2>&1) || { log "error: $arm -version: $version"; exit 1; }
[[ $version == "nodelocaldns test-arm64 "* ]] || { log "error: $arm -version printed \"$version\""; exit 1; }
# The standard manifest's iptables-mode args (deploy/testdata/standard-args.yaml): the ruleset is computed, not
# applied. stderr holds the kernel preflight, which is the host's either way.
args=(-localip 169.254.20.10,10.96.0.10 -conf /etc/Corefile -upstreamsvc kube-dns-upstream -pidfile /tmp/node-cache.pid)
$emu $arm -print-rules "${args[@]}" >$out/rules-arm64.nft 2>$out/rules-arm64.err ||
	{ cat $out/rules-arm64.err >&2; log "error: $arm -print-rules failed"; exit 1; }
$out/nodelocaldns -print-rules "${args[@]}" >$out/rules-host.nft 2>/dev/null
grep -q '^table inet nodelocaldns {' $out/rules-arm64.nft || { log "error: $arm -print-rules printed no table"; exit 1; }
diff -u $out/rules-host.nft $out/rules-arm64.nft >&2 || { log "error: the arm64 binary's ruleset differs from the host's"; exit 1; }
log "smoke test: $version; -print-rules equal to the host binary's ($(wc -l <$out/rules-arm64.nft) lines): $(elapsed "$started") s"
