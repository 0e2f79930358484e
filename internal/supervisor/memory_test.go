package supervisor

import (
	"os"
	"path/filepath"
	"testing"

	coredns "github.com/coredns/coredns/core/dnsserver"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// The case: four server blocks of 9984 success + 9984 denial entries under a 200Mi limit warns, in the
// log and in the gauges; the same Corefile under 1Gi says it fits.
func TestCheckMemory(t *testing.T) {
	block := "    cache {\n        success 9984\n        denial 9984\n    }\n    whoami\n}\n"
	cf := []byte("a:53 {\n" + block + "b:53 {\n" + block + "c:53 {\n" + block + "d:53 {\n" + block)
	for _, tc := range []struct {
		limit string
		level zapcore.Level
		fits  float64
	}{{"209715200", zapcore.WarnLevel, 0}, {"1073741824", zapcore.InfoLevel, 1}} {
		dir := t.TempDir()
		self := filepath.Join(dir, "cgroup")
		os.WriteFile(self, []byte("0::/\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "memory.max"), []byte(tc.limit+"\n"), 0o644)
		m, err := metrics.New(prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zap.InfoLevel)
		checkMemory(zap.New(core), m, cf, coredns.Directives, dir, self)
		all := logs.All()
		if len(all) != 1 || all[0].Level != tc.level {
			t.Fatalf("limit %s: logs %+v, want one line at %s", tc.limit, all, tc.level)
		}
		if got := gaugeValue(t, m.Memory.Fits); got != tc.fits {
			t.Errorf("limit %s: memory_worst_case_fits %v, want %v", tc.limit, got, tc.fits)
		}
		if got := gaugeValue(t, m.Memory.Limit); got != float64(mustAtoi(t, tc.limit)) {
			t.Errorf("memory_limit_bytes %v, want %s", got, tc.limit)
		}
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

func mustAtoi(t *testing.T, s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}
