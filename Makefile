# nodelocaldns: the README's two commands are `make demo` and `make test`; both install what they need.
GO       ?= go
BIN      := bin/nodelocaldns
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
export GOFLAGS ?= -buildvcs=false
# One build configuration for the binary, the tests and the image: static, and one build cache.
export CGO_ENABLED = 0

.PHONY: all build deps test test-unit test-race test-fuzz test-arm64 test-arm64-if-possible fuzz demo bench bench-nft bench-reconcile bench-configmap bench-serve docs-pictures clean

all: build

# Cold, the build compiles CoreDNS and its plugins (about 80 s on 2 cores), so it says so and how long it took.
build:
	@scripts/timed.sh "building $(BIN) (with CoreDNS)" $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nodelocaldns

deps:
	scripts/deps.sh test

# `make test`, what a contributor runs (README "Tests"), as root: vet, then every package's tests: unit and golden
# tests, kernel tests in throwaway network namespaces, the real binary end to end. Tests that need root skip with
# a message otherwise. `make test-ci`, what CI runs (.ci/run, then test-cluster), adds the stages that build the
# world again or emulate a machine: the race pass, the fuzz pass, the arm64 unit tests under qemu-user and the
# kernel VM's three boots. Each stage is a target of its own here, to run alone.
# Stages (scripts/test.sh): every stage runs even when an earlier one failed, and the run ends with a summary:
# a line per stage, each failed test with its package and the first lines of its output, and a last line naming
# the failures and any stage that did not run. Each stage's output is also in out/stages/NAME.log. Under CI=true
# the kernel VM and the arm64 run are required (test/kernel/kernel.mk, scripts/test-arm64.sh).
# In test-ci the emulated stages (arm64 under qemu-user, the kernel VM under QEMU's TCG: mostly one busy core
# each, needing nothing from the others) run one after the other in a second lane ("&"), beside vet, go, race and
# fuzz, whose end-to-end tests spend much of their time waiting for packets, timeouts and reloads. Their output
# goes to out/stages/{arm64,kernel}.log.
STAGES      := $(CURDIR)/out/stages
TEST_STAGES := vet:test-vet go:test-go
CI_STAGES   := arm64:test-arm64-if-possible& kernel:test-kernel-if-possible& vet:test-vet go:test-go race:test-race fuzz:test-fuzz
test: deps out/testsummary
	@echo "make test: vet and every package's tests; make test-ci also runs the race, fuzz, arm64 and kernel VM stages"
	@MAKE='$(MAKE)' scripts/test.sh $(STAGES) $(foreach s,$(TEST_STAGES),'$(s)')
test-ci: deps out/testsummary
	@MAKE='$(MAKE)' scripts/test.sh $(STAGES) $(foreach s,$(CI_STAGES),'$(s)')

# The speed-sensitive part of the suite (every go test package, unit and end to end, then the race pass) beside a
# CPU hog of 2 stress-ng workers (scripts/with-cpu-hog.sh), as a busy CI machine or laptop runs it: a test whose
# verdict depends on the machine's speed fails here first. STRESS_COUNT=N runs each test N times. The fuzz, arm64
# and VM stages are left out: they count work, not time, and take the machine for long under a hog.
STRESS_COUNT ?= 1
test-stress: deps out/testsummary
	@scripts/with-cpu-hog.sh env MAKE='$(MAKE)' TEST_COUNT=$(STRESS_COUNT) scripts/test.sh $(CURDIR)/out/stages-stress \
		$(foreach s,$(STRESS_STAGES),'$(s)')
STRESS_STAGES := go:test-go race:test-race

.PHONY: out/testsummary test-ci test-vet test-go test-stress
out/testsummary:
	@$(GO) build -o out/testsummary ./cmd/testsummary

test-vet:
	$(GO) vet ./...

# Every package's tests once (TEST_COUNT), through cmd/testsummary: the output of failed and skipped tests, then
# one line per package. Tests that measure something (the lifecycle matrix's failed-query counts, the foreign
# rulesets' drops, the migration's) write a report under out/reports, printed with SHOW_REPORTS=1; a failing one
# shows its table in its own output.
REPORTS    := $(CURDIR)/out/reports
TEST_COUNT ?= 1
TEST_PKGS  ?= ./...
test-go: out/testsummary
	@rm -rf $(REPORTS) && mkdir -p $(REPORTS)
	@NODELOCALDNS_TEST_REPORTS=$(REPORTS) $(GO) test -json -count=$(TEST_COUNT) -timeout $$((20 * $(TEST_COUNT)))m $(TEST_PKGS) 2>&1 | \
		out/testsummary -failures "$${STAGE_FAILURES:-}"; status=$$?; \
	if [ -n "$(SHOW_REPORTS)" ]; then for f in $(REPORTS)/*.txt; do [ -f "$$f" ] && { echo; echo "== $$(basename $$f .txt)"; cat "$$f"; }; done; \
	else echo "reports: $$(ls $(REPORTS) | tr '\n' ' ')in $(REPORTS) (SHOW_REPORTS=1 prints them)"; fi; \
	exit $$status

# The race detector, as root: the unit tests, then the real binary built with -race (NODELOCALDNS_TEST_RACE=1:
# the harness builds it so, and fails a test whose agent's stderr holds a race report) through one walk of start,
# serve, reload, surge and stop, and the ConfigMap reload tests. A short pass of its own: the whole end-to-end
# suite is too slow under -race. The race runtime needs cgo, so this step alone turns it on.
RACE_UNIT := ./cmd/... ./internal/... ./deploy/... ./scripts/... ./test/harness/
RACE_E2E  := TestStartServeReloadSurgeStop|TestReloadGivingTheAddressBackLosesNoMiss|TestBaseCorefileUpdate|TestReloadWithSignal|TestNoFailureDuringReloads|TestHealthFailsWhileDNSDoesNotAnswer
test-race: out/testsummary
	@status=0; \
	CGO_ENABLED=1 $(GO) test -race -json -count=1 -timeout 10m $(RACE_UNIT) 2>&1 | out/testsummary -failures "$${STAGE_FAILURES:-}" || status=1; \
	CGO_ENABLED=1 NODELOCALDNS_TEST_RACE=1 $(GO) test -race -json -count=1 -timeout 10m -run '^($(RACE_E2E))$$' \
		./test/e2e/lifecycle/ ./test/e2e/configmap/ 2>&1 | out/testsummary -failures "$${STAGE_FAILURES:-}" || status=1; \
	exit $$status

# The arm64 build under user-mode emulation (scripts/test-arm64.sh): the unit tests of ARM64_PKGS built with
# GOARCH=arm64 and run by qemu-aarch64 (Debian's qemu-user, no binfmt_misc), then the image's arm64 binary's
# -version and -print-rules, whose ruleset must be the host binary's. Kernel tests skip there (internal/testenv).
# test-arm64-if-possible skips, saying why, where qemu-user cannot be installed: for `make test-ci`. Under CI=true it
# is test-arm64. The first run builds CoreDNS and the test binaries for arm64 (about 2.5 minutes on 2 shared CPUs;
# the arm64 packages are shared with `make image`); warm, it takes about 45 s.
ARM64_PKGS := ./cmd/... ./internal/...
# What qemu-user 7.2 does not emulate: TestServeReloadStop's reload needs SO_COOKIE (the fast path tells CoreDNS's
# sockets from its own by it; qemu answers EINVAL). TestPeerOwner runs its own test binary as a second process,
# which without binfmt_misc the kernel cannot execute (exec format error). connlimit's kernel tests: qemu-user has no
# NETLINK_SOCK_DIAG ("protocol not supported") and answers a listener's TCP_INFO with an empty accept queue. The
# steered TCP listeners' tests: qemu-user answers setsockopt(SO_INCOMING_CPU) with ENOPROTOOPT ("protocol not
# available"), so the fast path's TCP steps aside there and connlimit caps CoreDNS's listener, as on a kernel
# before 6.1; TestTCPCloseLeavesAtOnce opens such listeners too. TestDetachedCoreSocketClosesAfterABlockingRead
# finds its blocked read in /proc/self/task/*/syscall, which under qemu-user shows the emulator's own threads.
ARM64_SKIP := ^(TestServeReloadStop|TestPeerOwner|TestPassClosesOverTheCap|TestWakesOnConnections|TestQueuedCountsTheAcceptQueue|TestPassClosesQueued|TestSteeredListenersTakeEveryConnection|TestTCPAcceptedWithinTheCap|TestTCPCloseLeavesAtOnce|TestPassClosesTheNewcomer|TestDetachedCoreSocketClosesAfterABlockingRead)$$
test-arm64: out/testsummary
	ARM64_PKGS='$(ARM64_PKGS)' ARM64_SKIP='$(ARM64_SKIP)' scripts/test-arm64.sh
test-arm64-if-possible: out/testsummary
	ARM64_PKGS='$(ARM64_PKGS)' ARM64_SKIP='$(ARM64_SKIP)' scripts/test-arm64.sh --if-possible

# Fuzz targets, as package:Target. The seed corpora (f.Add and testdata/fuzz/) run in every `go test`; test-fuzz
# mutates each for FUZZ_SHORT as part of `make test-ci`, `make fuzz` for FUZZ_TIME each. Each list is its own variable
# so that another part's targets join FUZZ_TARGETS without touching these.
FUZZ_ROBUST  := ./internal/nft/nftwatch:FuzzWatchFilter ./internal/nft/nftwatch:FuzzWatchParse ./internal/corefile:FuzzCorefileAtStart \
	./internal/corefile:FuzzRender ./internal/dnsname:FuzzUnderAsMiekg
FUZZ_TARGETS += $(FUZZ_ROBUST)
# The fast path's: the first -fuzz run of internal/fastpath builds CoreDNS with coverage instrumentation (about
# 3 minutes on 2 CPUs, seconds once cached).
FUZZ_FASTPATH := ./internal/fastpath:FuzzTTLOffsets ./internal/fastpath:FuzzHitAnswersLikeCoreDNS
FUZZ_TARGETS += $(FUZZ_FASTPATH)
# FUZZ_SHORT is a count, not a duration: Go 1.26's fuzz coordinator can fail a target that found nothing with
# "context deadline exceeded" when a -fuzztime duration runs out (golang/go#75804, fixed in Go 1.27). A count has no
# deadline to race, so a loaded CI machine only makes it slower. `make fuzz` stays a long duration, run by hand.
FUZZ_SHORT   ?= 5000x
FUZZ_TIME    ?= 2m
test-fuzz:
	@mkdir -p out; failed=; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		scripts/timed.sh "fuzz $$pkg $$fn ($(FUZZ_SHORT))" $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZ_SHORT) $$pkg >out/fuzz-$$fn.log 2>&1 || \
			{ cat out/fuzz-$$fn.log; failed="$$failed $$fn"; }; \
	done; [ -z "$$failed" ] || { echo "fuzz targets failed:$$failed"; exit 1; }
fuzz:
	$(MAKE) --no-print-directory test-fuzz FUZZ_SHORT=$(FUZZ_TIME)

test-unit:
	$(GO) test -count=1 ./...

# A throwaway network namespace with a small upstream DNS server (dnsmasq), the agent serving in it, a few lookups.
demo: build
	scripts/deps.sh demo
	unshare --net scripts/demo.sh $(BIN)

bench: bench-nft bench-reconcile bench-configmap bench-serve

bench-nft:
	$(GO) run ./bench/nft

bench-reconcile:
	$(GO) run ./bench/reconcile

bench-configmap:
	$(GO) run ./bench/configmap

# BENCH_SERVE_FLAGS passes flags: -idle-only measures only the idle CPU (about 3 minutes).
bench-serve:
	scripts/deps.sh bench
	$(GO) run ./bench/serve $(BENCH_SERVE_FLAGS)

# Every Mermaid block of docs/*.md rendered by the real renderer (mermaid-cli and Debian's chromium, installed on
# first use) into out/pictures/, one PNG per block; fails naming each block that does not render. Not part of
# `make test` (the chromium install is heavy): a docs change runs it.
docs-pictures:
	scripts/docs-pictures.sh

clean:
	rm -rf bin out

include deploy/deploy.mk
# test-kernel and test-kernel-if-possible: the kernel tests inside a VM booting Debian's stock kernel.
include test/kernel/kernel.mk
# test-cluster: the manifests on a real two-node Kubernetes in a network namespace (both kube-proxy modes).
include test/cluster/cluster.mk
