# Kernel matrix, included from the top-level Makefile: boot Debian's stock kernel in QEMU (TCG) and run
# the kernel tests of internal/link and internal/nft (its subpackages too) inside it, with the production `dummy`
# link kind. Needs root (apt-get install of qemu-system-x86, busybox-static, kmod, cpio; the kernel is cached
# under .cache/kernel).
#   make test-kernel                          all tests of both packages in the VM; fails on any failure
#   make test-kernel KERNEL_TEST_RUN=VM       only tests matching the -test.run pattern
#   make test-kernel-if-possible              as test-kernel, but skips (exit 0, saying why) when QEMU or the
#                                             kernel package cannot be installed: for `make test-ci`. Under
#                                             CI=true it is test-kernel: CI is never green without the VM.
# The VM also runs the real binary's lifecycle smoke test (test/kernel/lifecycle.sh). Its full serial log goes to
# .cache/kernel/vm.log; the terminal gets a summary.
# A second boot holds nft_socket back (KERNEL_HOLD_BACK), as Azure Linux 3 x86_64, Flatcar and Talos before 1.14
# ship their kernels: the lifecycle smoke test, the fallback's tests and the ungated table's there
# (.cache/kernel/vm-without-nft_socket.log). Both boots run the lifecycle matrix (test/kernel/matrix.sh). A third,
# short boot (about 30 s) holds nft_ct back (.cache/kernel/vm-without-nft_ct.log).
.PHONY: test-kernel test-kernel-if-possible

KERNEL_DEGRADED_RUN ?= ^(TestKernelWithoutNftSocket|TestProbeCapabilities|TestProbeReportsTheKernelsRefusal|TestHost|TestUngatedFollowsTheBoundAddresses|TestApplyFallbackListsAsGolden|TestFallbackInSyncSeesChanges|TestFallbackLease|TestFallbackOutlivesConn)$$

# A third boot holds nft_ct back: the preflight names conntrack and the agent's start-up fails (lifecycle.sh).
KERNEL_NOCT_RUN ?= ^(TestProbeCapabilities|TestHost)$$

# The three boots run whether or not an earlier one failed (a failure in the first must not hide what the others
# would say); the target fails if any did, and its last line names them.
KERNEL_BOOTS = \
	status=0; failed=; \
	KERNEL_TEST_RUN='$(KERNEL_TEST_RUN)' bash test/kernel/run.sh $(1) || { status=1; failed="$$failed full"; }; \
	KERNEL_TEST_RUN='$(KERNEL_DEGRADED_RUN)' KERNEL_HOLD_BACK=nft_socket bash test/kernel/run.sh $(1) || { status=1; failed="$$failed without-nft_socket"; }; \
	KERNEL_TEST_RUN='$(KERNEL_NOCT_RUN)' KERNEL_HOLD_BACK=nft_ct bash test/kernel/run.sh $(1) || { status=1; failed="$$failed without-nft_ct"; }; \
	[ $$status = 0 ] || echo "kernel: boots failed:$$failed (their output above)"; exit $$status

test-kernel:
	@$(call KERNEL_BOOTS,)

test-kernel-if-possible:
	@$(call KERNEL_BOOTS,--if-possible)
