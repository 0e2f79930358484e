package instance

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// testMetrics are real collectors in a registry of the test's own, so that what a test drives counts as it
// would in the agent, and a test may read it back.
func testMetrics(t testing.TB) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
