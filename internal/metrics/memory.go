package metrics

import "github.com/prometheus/client_golang/prometheus"

// Memory holds the gauges of the memory check (internal/memcheck), set at start and on every reload.
type Memory struct {
	Limit     prometheus.Gauge // the cgroup's memory limit in bytes; 0 for none
	WorstCase prometheus.Gauge // the Corefile's worst case in bytes
	Fits      prometheus.Gauge // 1 when the worst case stays under the limit (or there is none)
}

// NewMemory creates the memory-check gauges and registers them with reg.
func NewMemory(reg prometheus.Registerer) (*Memory, error) {
	m := &Memory{
		Limit: gauge("memory_limit_bytes", "The memory limit of the agent's cgroup (memory.max, or memory.limit_in_bytes on cgroup v1); 0 when there is none."),
		WorstCase: gauge("memory_worst_case_bytes",
			"The worst case of the served Corefile: every cache directive's success and denial capacity full of worst-case entries, the fast path's stores, and the agent's own baseline."),
		Fits: gauge("memory_worst_case_fits", "1 when memory_worst_case_bytes stays under memory_limit_bytes (or there is no limit); 0 when a full cache would be OOM-killed."),
	}
	return m, register(reg, m.Limit, m.WorstCase, m.Fits)
}

// Set records one check.
func (m *Memory) Set(limit, worstCase int64, fits bool) {
	m.Limit.Set(float64(limit))
	m.WorstCase.Set(float64(worstCase))
	f := 0.0
	if fits {
		f = 1
	}
	m.Fits.Set(f)
}
