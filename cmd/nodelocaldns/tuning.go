package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Runtime tuning for a node-local DNS cache. bench/serve measures every knob against node-cache's way of running
// the same engine (Go's defaults); docs/performance.md has the table and the reasons. GOMAXPROCS is not here:
// since Go 1.25 the runtime derives it from the cgroup CPU limit and follows changes to it.
const (
	// tuningEnv=off leaves every runtime setting at Go's default, as node-cache runs CoreDNS.
	tuningEnv = "NODELOCALDNS_TUNING"
	// gcPercent is Go's default again: with the fast path (internal/fastpath) a cache hit allocates nothing, so
	// the garbage that made 400 pay (a few KiB per hit) is gone, and 400 only held heap the memory-limited pods
	// need: bench/serve measured the CPU per query with 100 within noise of 400 and the peak RSS lower
	// (docs/performance.md). It stays a constant here so the bench's knob rows and GOGC in the environment keep
	// their meaning.
	gcPercent = 100
	// memLimitShare of the container's memory limit becomes the soft memory limit, so that the larger GC
	// headroom never pushes the agent into an OOM kill: near the limit the GC runs as often as it must.
	memLimitShare = 0.9
	// cgroupMemMax is the cgroup v2 memory limit of the container ("max" when unlimited).
	cgroupMemMax = "/sys/fs/cgroup/memory.max"
)

// tuning is what tune applied.
type tuning struct {
	Off         bool
	GCPercent   int   // 0: left as is (GOGC set, or tuning off)
	MemoryLimit int64 // bytes; 0: left as is (GOMEMLIMIT set, no cgroup limit, or tuning off)
}

// tune applies the runtime defaults unless tuning is off; a Go variable the user set (GOGC, GOMEMLIMIT) wins.
// readFile reads the cgroup limit (os.ReadFile in production).
func tune(getenv func(string) string, readFile func(string) ([]byte, error)) tuning {
	if strings.EqualFold(getenv(tuningEnv), "off") {
		return tuning{Off: true}
	}
	var t tuning
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
		t.GCPercent = gcPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if limit, ok := memoryLimit(readFile); ok {
			t.MemoryLimit = int64(float64(limit) * memLimitShare)
			debug.SetMemoryLimit(t.MemoryLimit)
		}
	}
	return t
}

// memoryLimit reads the cgroup v2 memory limit; ok is false when there is none or it cannot be read.
func memoryLimit(readFile func(string) ([]byte, error)) (int64, bool) {
	b, err := readFile(cgroupMemMax)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v == math.MaxInt64 {
		return 0, false
	}
	return v, true
}

// logTuning logs what tune applied, with the GOMAXPROCS the runtime chose.
func logTuning(log *zap.Logger, t tuning) {
	log.Info("runtime tuning", zap.Bool("off", t.Off), zap.Int("gcpercent", t.GCPercent), zap.Bool("gcpaced", t.GCPercent != 0),
		zap.Int64("memorylimit", t.MemoryLimit), zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
}
