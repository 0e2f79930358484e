package supervisor

import (
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/memcheck"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// Where the memory check reads our cgroup's limit; tests point them elsewhere.
const (
	cgroupRoot     = "/sys/fs/cgroup"
	procSelfCgroup = "/proc/self/cgroup"
)

// checkMemory weighs the Corefile about to be served against our cgroup's memory limit, in one log line and
// the memory gauges. A worst case over the limit is a warning, not a refusal: it is an upper bound that full
// caches of worst-case entries reach only under hostile load, refusing at start would leave the node with no
// DNS at all, and refusing a reload would block every other change (a stub domain, an upstream) for the sake of
// a cache size the running config may share. The warning names the numbers so the limit or the capacities can
// be fixed before the OOM killer does it.
func checkMemory(log *zap.Logger, m *metrics.Metrics, cf []byte, directives []string, root, self string) {
	caches, err := memcheck.Caches(cf, directives)
	if err != nil {
		log.Warn("memory check: corefile not parsed", zap.Error(err))
		return
	}
	limit, file, err := memcheck.CgroupLimit(root, self)
	if err != nil {
		log.Warn("memory check: cgroup memory limit not read", zap.Error(err))
	}
	e := memcheck.New(caches, limit)
	m.Memory.Set(e.Limit, e.WorstCase, e.Fits())
	fields := []zap.Field{zap.Int("caches", e.Caches), zap.Int64("entries", e.Entries),
		zap.String("worst_case", memcheck.MiB(e.WorstCase)), zap.Int64("worst_case_bytes", e.WorstCase),
		zap.String("limit", memcheck.MiB(e.Limit)), zap.Int64("limit_bytes", e.Limit), zap.String("limit_file", file)}
	switch {
	case e.Limit == 0:
		log.Info("memory worst case (no cgroup memory limit)", fields...)
	case e.Fits():
		log.Info("memory worst case fits the cgroup memory limit", fields...)
	default:
		log.Warn("memory worst case exceeds the cgroup memory limit: full caches would be oom-killed; raise the limit or lower the cache capacities", fields...)
	}
}
