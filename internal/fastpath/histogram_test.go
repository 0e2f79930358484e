package fastpath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coredns/coredns/plugin/metrics/vars"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The fast path's share of a histogram, gathered into CoreDNS's series, reads exactly as that series would
// had CoreDNS observed every value itself: classic buckets, count, sum and native buckets, for CoreDNS's own
// three histograms (their buckets and factor, read from plugin/metrics/vars), with values on every side of
// the native window and on the classic and native bucket bounds.
func TestHistMatchesClientGolang(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	durations := []float64{0, 1e-12, 0x1p-25, 0x1p-26, 0.5, 1, 2, 256, 257, 1e4}
	for _, b := range prometheusBounds(t, vars.RequestDuration.WithLabelValues("bounds", t.Name(), "")) {
		durations = append(durations, b, math.Nextafter(b, 0), math.Nextafter(b, 2*b))
	}
	bounds, ok := readNativeBounds()
	if !ok {
		t.Fatal("client_golang's native buckets are not as the fast path reads them")
	}
	for _, b := range bounds {
		durations = append(durations, b*0x1p-10, math.Nextafter(b*0x1p-10, 0))
	}
	for range 3000 {
		durations = append(durations, math.Exp(rng.Float64()*30-25)) // 1.4e-11 s to 148 s
	}
	var sizes []float64
	for n := range 70000 {
		if n < 5000 || rng.IntN(20) == 0 {
			sizes = append(sizes, float64(n))
		}
	}
	sizes = append(sizes, 0x1p34, 1e12)
	for _, tc := range []struct {
		name   string
		family string
		vec    *prometheus.HistogramVec
		labels []string
		lo     int32
		values []float64
	}{
		{"duration", durationFamily, vars.RequestDuration, []string{"", ""}, durationKeys, durations},
		{"response size", sizeFamily, vars.ResponseSize, []string{"", "", "udp"}, sizeKeys, sizes},
		{"request size", reqSizeFamily, vars.RequestSize, []string{"", "", "udp"}, sizeKeys, sizes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// CoreDNS's vectors are the process's: series of their own in every run of the test (-count).
			run := fmt.Sprintf("%s/%d", t.Name(), runs.Add(1))
			series := func(server string) prometheus.Observer {
				return tc.vec.WithLabelValues(append([]string{server + run}, tc.labels...)...)
			}
			var m Metrics
			ours, ref := m.hists.get(tc.family, series("ours"), tc.lo), series("ref")
			if ours.direct {
				t.Fatalf("CoreDNS's %s is not of schema %d: the fast path observes it through client_golang", tc.family, nativeSchema)
			}
			for i, v := range tc.values {
				n := 1 + i%3
				for range n {
					ref.Observe(v)
				}
				if i%7 == 0 { // some observed by CoreDNS itself: the gathered series is the sum
					for range n {
						ours.outside.Observe(v)
					}
				} else {
					ours.observe(ours.point(v), n)
				}
			}
			got, want := gathered(t, m.Gatherer(prometheus.DefaultGatherer), tc.family, "ours"+run), gathered(t, prometheus.DefaultGatherer, tc.family, "ref"+run)
			sameHistogram(t, got, want)
		})
	}
}

// runs numbers the test's runs in this process.
var runs atomic.Int64

// A series that is not a native histogram of the fast path's schema is observed through client_golang.
func TestHistOtherSchema(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "classic_only", Buckets: []float64{1, 10}}, []string{"s"})
	reg.MustRegister(vec)
	var m Metrics
	ours, ref := m.hists.get("classic_only", vec.WithLabelValues("ours"), sizeKeys), vec.WithLabelValues("ref")
	if !ours.direct {
		t.Fatal("a classic histogram is counted by the fast path, which keeps native buckets")
	}
	observeTwice(ours, ref)
	sameHistogram(t, gathered(t, m.Gatherer(reg), "classic_only", "ours"), gathered(t, reg, "classic_only", "ref"))
}

// observeTwice counts a few values twice each in ours, as a reader counts a batch's answers, and observes each
// twice through client_golang in ref.
func observeTwice(ours *hist, ref prometheus.Observer) {
	for _, v := range []float64{0, 1, 5, 10, 11, 1e6} {
		ours.observe(ours.point(v), 2)
		ref.Observe(v)
		ref.Observe(v)
	}
}

// Without client_golang's native bounds (a version that does not answer as readNativeBounds takes), every
// histogram is observed through client_golang, and finding a value's buckets needs none.
func TestHistWithoutNativeBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "no_bounds", Buckets: []float64{1, 10},
		NativeHistogramBucketFactor: 1.05}, []string{"s"})
	reg.MustRegister(vec)
	ours, ref := newHist("no_bounds", vec.WithLabelValues("ours"), sizeKeys, nil), vec.WithLabelValues("ref")
	if !ours.direct {
		t.Fatal("a histogram without native bounds is counted by the fast path")
	}
	observeTwice(ours, ref)
	var m Metrics
	sameHistogram(t, gathered(t, m.Gatherer(reg), "no_bounds", "ours"), gathered(t, reg, "no_bounds", "ref"))
}

// Gathered while readers count, a series is never torn: the count is the native buckets' sum and the
// classic buckets', and it only grows.
func TestHistGatheredWhileCounting(t *testing.T) {
	var m Metrics
	h := m.hists.get(sizeFamily, vars.ResponseSize.WithLabelValues(t.Name(), "", "", "udp"), sizeKeys)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			p := h.point(float64(100 + r*300))
			for {
				select {
				case <-stop:
					return
				default:
					h.observe(p, 3)
				}
			}
		})
	}
	var last uint64
	for range 200 {
		d := gathered(t, m.Gatherer(prometheus.DefaultGatherer), sizeFamily, t.Name())
		var native int64
		for _, n := range nativeCounts(d.PositiveSpan, d.PositiveDelta) {
			native += n
		}
		if c := d.GetSampleCount(); c < last || uint64(native)+d.GetZeroCount() != c || d.Bucket[len(d.Bucket)-1].GetCumulativeCount() != c {
			t.Fatalf("count %d (before: %d), native buckets %d+%d, classic %d", c, last, native, d.GetZeroCount(),
				d.Bucket[len(d.Bucket)-1].GetCumulativeCount())
		}
		last = d.GetSampleCount()
	}
	close(stop)
	wg.Wait()
	if last == 0 {
		t.Fatal("nothing counted while gathering")
	}
}

// A native histogram's spans and deltas decode to the counts they were encoded from, gaps and all.
func TestNativeSpansRoundTrip(t *testing.T) {
	counts := map[int32]int64{-5: 3, -4: 1, 0: 7, 1: 7, 2: 2, 40: 1}
	spans, deltas := nativeSpans(counts)
	if len(spans) != 3 {
		t.Errorf("%d spans for 3 runs of keys", len(spans))
	}
	got := nativeCounts(spans, deltas)
	if len(got) != len(counts) {
		t.Fatalf("decoded %v, want %v", got, counts)
	}
	for k, n := range counts {
		if got[k] != n {
			t.Errorf("key %d: %d, want %d", k, got[k], n)
		}
	}
}

func prometheusBounds(t *testing.T, obs prometheus.Observer) []float64 {
	t.Helper()
	var d dto.Metric
	if err := obs.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	var b []float64
	for _, x := range d.Histogram.Bucket {
		b = append(b, x.GetUpperBound())
	}
	return b
}

// gathered is the histogram of family whose server label starts with server.
func gathered(t *testing.T, g prometheus.Gatherer, family, server string) *dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if (l.GetName() == "server" || l.GetName() == "s") && strings.HasPrefix(l.GetValue(), server) {
					return m.Histogram
				}
			}
		}
	}
	t.Fatalf("no %s series of server %s gathered", family, server)
	return nil
}

func sameHistogram(t *testing.T, got, want *dto.Histogram) {
	t.Helper()
	if got.GetSampleCount() != want.GetSampleCount() {
		t.Errorf("count %d, want %d", got.GetSampleCount(), want.GetSampleCount())
	}
	if g, w := got.GetSampleSum(), want.GetSampleSum(); math.Abs(g-w) > 1e-9*math.Abs(w) {
		t.Errorf("sum %v, want %v", g, w)
	}
	if len(got.Bucket) != len(want.Bucket) {
		t.Fatalf("%d classic buckets, want %d", len(got.Bucket), len(want.Bucket))
	}
	for i := range got.Bucket {
		if g, w := got.Bucket[i], want.Bucket[i]; g.GetUpperBound() != w.GetUpperBound() || g.GetCumulativeCount() != w.GetCumulativeCount() {
			t.Errorf("classic bucket le=%v: %d, want le=%v: %d", g.GetUpperBound(), g.GetCumulativeCount(), w.GetUpperBound(), w.GetCumulativeCount())
		}
	}
	if got.GetSchema() != want.GetSchema() || got.GetZeroThreshold() != want.GetZeroThreshold() || got.GetZeroCount() != want.GetZeroCount() {
		t.Errorf("schema %d, zero bucket %v: %d; want %d, %v: %d", got.GetSchema(), got.GetZeroThreshold(), got.GetZeroCount(),
			want.GetSchema(), want.GetZeroThreshold(), want.GetZeroCount())
	}
	g, w := nativeCounts(got.PositiveSpan, got.PositiveDelta), nativeCounts(want.PositiveSpan, want.PositiveDelta)
	if len(g) != len(w) {
		t.Errorf("%d native buckets, want %d", len(g), len(w))
	}
	for k, n := range w {
		if g[k] != n {
			t.Errorf("native bucket %d: %d, want %d", k, g[k], n)
		}
	}
	if len(got.NegativeSpan) != 0 {
		t.Errorf("negative buckets %v", got.NegativeSpan)
	}
}
