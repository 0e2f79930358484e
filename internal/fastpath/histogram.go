package fastpath

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The fast path's share of CoreDNS's three histograms (coredns_dns_request_duration_seconds,
// coredns_dns_request_size_bytes, coredns_dns_response_size_bytes). Observed through client_golang, a hit cost
// three Observes, each a binary search, five atomic operations and a sync.Map look-up for its native bucket:
// a third of a hit's user time in a perf profile of bench/serve's cache-hit workload. Here a reader adds a
// batch's answers to counts of its own, under one lock per histogram per run of answers from one label set (the
// bucket of a value the fast path answers with, its response and request size, is found once, when the answer
// is learned), and Metrics.Gatherer adds those counts into CoreDNS's series of the same labels when the
// registry is gathered: a scrape sees one histogram, classic buckets and native ones, as if CoreDNS had
// observed every answer. Each side is consistent on its own (CoreDNS's by client_golang's hot and cold
// counts, ours by its lock), so their sum is too: a native histogram's count is never below its buckets'.

// nativeSchema is the native histograms' resolution: CoreDNS's NativeHistogramBucketFactor (1.05) gives
// schema 4, 16 buckets per power of two, the bucket with key k holding (2^((k-1)/16), 2^(k/16)]. A histogram
// of another schema (a CoreDNS that changed its factor) is observed through client_golang, as before.
const nativeSchema = 4

// nativeBounds are the upper bounds of one power of two's buckets, as fractions of math.Frexp: 2^(i/16 - 1),
// as client_golang has them. They are read from client_golang, not computed again: its constants are not all
// the nearest float64 to 2^(i/16 - 1) (the 10th is one unit below it), so a value on such a bound would land in
// a bucket next to CoreDNS's own. nativeBound finds each by bisection of a histogram's key over the float64s in
// [0.5, 1): 53 probes per bound, once per process (2 ms, histSet), when the first histogram is made.
type nativeBounds [1 << nativeSchema]float64

// readNativeBounds reads them; ok is false when client_golang does not answer as that takes (a version with
// other keys): then every histogram is observed through client_golang.
func readNativeBounds() (b nativeBounds, ok bool) {
	if probeKey(0.5) != 0 || probeKey(1) != 1<<nativeSchema {
		return b, false
	}
	for i := range b {
		b[i] = nativeBound(int32(i))
	}
	return b, true
}

// nativeBound is the largest float64 in [0.5, 1) that client_golang puts in a bucket up to the i-th of that
// power of two: the i-th bucket's upper bound.
func nativeBound(i int32) float64 {
	// probeKey(lo) <= i < probeKey(hi) throughout; float64 bits are in the order of the (positive) floats.
	lo, hi := math.Float64bits(0.5), math.Float64bits(1)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if probeKey(math.Float64frombits(mid)) <= i {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Float64frombits(lo)
}

// probeKey is the bucket client_golang puts v in, v in [0.5, 1], counted from the one ending at 0.5 (key -16,
// then 0 for 0.5 and 16 for 1), in a histogram of CoreDNS's factor (nativeSchema); -1 if it has no such
// bucket.
func probeKey(v float64) int32 {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "probe", NativeHistogramBucketFactor: 1.05})
	h.Observe(v)
	var m dto.Metric
	if h.Write(&m) != nil || m.Histogram.GetSchema() != nativeSchema || len(m.Histogram.PositiveSpan) != 1 {
		return -1
	}
	return m.Histogram.PositiveSpan[0].GetOffset() + 1<<nativeSchema
}

// zeroKey is a point's native key when it falls in the zero bucket.
const zeroKey = math.MinInt32

// key is v's native bucket key (v above the zero threshold), as client_golang computes it.
func (b *nativeBounds) key(v float64) int32 {
	frac, exp := math.Frexp(v)
	return int32(sort.SearchFloat64s(b[:], frac) + (exp-1)*len(b))
}

// point is a value and its buckets in one kind of histogram, found once for values observed many times.
type point struct {
	v       float64
	classic int32 // index of the classic bucket: the first upper bound not below v (the last: +Inf)
	native  int32 // native key, or zeroKey
}

// Native windows: the keys a histogram counts itself. A value outside (a duration under 2^-25 s or over 256 s)
// is observed through client_golang: rare, and exact either way.
const (
	durationKeys = -400 // from 2^-25 s
	sizeKeys     = 0    // from 1 byte (0 is in the zero bucket)
	windowKeys   = 529  // durations to 2^8 s, sizes to 2^33 bytes: 4 KiB per histogram
)

// hist is the fast path's share of one CoreDNS histogram series.
type hist struct {
	// Set once, from CoreDNS's own series (newHist).
	family    string
	labels    []*dto.LabelPair // as the gathered series has them
	bounds    []float64        // the classic buckets' upper bounds, +Inf not included
	zeroBound float64          // the native zero bucket's threshold
	lo        int32            // the native key of native[0]
	keys      *nativeBounds
	outside   prometheus.Observer
	direct    bool // every value goes to outside: CoreDNS's series is not of nativeSchema

	mu      sync.Mutex
	classic []uint64 // per bucket, not cumulative; len(bounds)+1
	zero    uint64
	native  []uint64 // keys lo, lo+1, ...
	sum     float64
}

// newHist is the fast path's share of CoreDNS's series obs (a child of one of its histogram vectors) in family,
// counting native keys from lo: its buckets are read from the series itself.
// keys are nil when client_golang's could not be read.
func newHist(family string, obs prometheus.Observer, lo int32, keys *nativeBounds) *hist {
	h := &hist{family: family, outside: obs, lo: lo, keys: keys, direct: true}
	m, ok := obs.(prometheus.Metric)
	var d dto.Metric
	if !ok || m.Write(&d) != nil || d.Histogram == nil {
		return h
	}
	h.labels = d.Label
	for _, b := range d.Histogram.Bucket {
		if !math.IsInf(b.GetUpperBound(), 1) {
			h.bounds = append(h.bounds, b.GetUpperBound())
		}
	}
	h.zeroBound = d.Histogram.GetZeroThreshold()
	h.classic = make([]uint64, len(h.bounds)+1)
	if keys != nil && d.Histogram.Schema != nil && d.Histogram.GetSchema() == nativeSchema {
		h.native = make([]uint64, windowKeys)
		h.direct = false
	}
	return h
}

// point finds v's buckets.
func (h *hist) point(v float64) point {
	p := point{v: v, classic: int32(sort.SearchFloat64s(h.bounds, v)), native: zeroKey}
	if !h.direct && v > h.zeroBound { // a direct histogram has no native keys to find (keys may be nil)
		p.native = h.keys.key(v)
	}
	return p
}

// add counts n observations of p; h.mu is held.
func (h *hist) add(p point, n int) {
	k := int(p.native - h.lo)
	switch {
	case h.direct || p.native != zeroKey && (k < 0 || k >= len(h.native)):
		for range n {
			h.outside.Observe(p.v)
		}
		return
	case p.native == zeroKey:
		h.zero += uint64(n)
	default:
		h.native[k] += uint64(n)
	}
	h.classic[p.classic] += uint64(n)
	h.sum += p.v * float64(n)
}

// observe counts n observations of p.
func (h *hist) observe(p point, n int) {
	h.mu.Lock()
	h.add(p, n)
	h.mu.Unlock()
}

// observeEach counts one observation of each entry's point at.
func (h *hist) observeEach(entries []*entry, at func(*entry) point) {
	h.mu.Lock()
	for _, e := range entries {
		h.add(at(e), 1)
	}
	h.mu.Unlock()
}

// addTo adds h's counts to d, CoreDNS's series of the same labels as gathered.
func (h *hist) addTo(d *dto.Histogram) {
	h.mu.Lock()
	classic, native, zero, sum := slices.Clone(h.classic), slices.Clone(h.native), h.zero, h.sum
	h.mu.Unlock()
	var total uint64
	for i, n := range classic {
		total += n
		if i < len(d.Bucket) && i < len(h.bounds) {
			d.Bucket[i].CumulativeCount = new(d.Bucket[i].GetCumulativeCount() + total)
		}
	}
	if total == 0 {
		return
	}
	d.SampleCount = new(d.GetSampleCount() + total)
	d.SampleSum = new(d.GetSampleSum() + sum)
	if h.direct {
		return
	}
	d.ZeroCount = new(d.GetZeroCount() + zero)
	counts := nativeCounts(d.PositiveSpan, d.PositiveDelta)
	for i, n := range native {
		if n > 0 {
			counts[h.lo+int32(i)] += int64(n)
		}
	}
	d.PositiveSpan, d.PositiveDelta = nativeSpans(counts)
}

// nativeCounts decodes a native histogram's spans and deltas into counts by key.
func nativeCounts(spans []*dto.BucketSpan, deltas []int64) map[int32]int64 {
	counts := map[int32]int64{}
	var key int32
	var count int64
	i := 0
	for s, span := range spans {
		if s == 0 {
			key = span.GetOffset()
		} else {
			key += span.GetOffset()
		}
		for range span.GetLength() {
			if i < len(deltas) {
				count += deltas[i]
				i++
			}
			if count != 0 {
				counts[key] = count
			}
			key++
		}
	}
	return counts
}

// nativeSpans encodes counts by key as a native histogram's spans and deltas: a span per run of keys, the
// first delta the first count and each next one the difference from the one before.
func nativeSpans(counts map[int32]int64) ([]*dto.BucketSpan, []int64) {
	keys := make([]int32, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var spans []*dto.BucketSpan
	var deltas []int64
	var prev int32
	var last int64
	for i, k := range keys {
		if i == 0 || k != prev+1 {
			offset := k
			if i > 0 {
				offset = k - prev - 1
			}
			spans = append(spans, &dto.BucketSpan{Offset: new(offset), Length: new(uint32(0))})
		}
		*spans[len(spans)-1].Length++
		deltas = append(deltas, counts[k]-last)
		last, prev = counts[k], k
	}
	return spans, deltas
}

// histSet holds the fast path's histograms of one process, by CoreDNS series: like CoreDNS's vectors, they
// live until the process ends (a reload's new views count on into them).
type histSet struct {
	mu   sync.Mutex
	m    map[prometheus.Observer]*hist
	keys *nativeBounds // read with the first histogram; nil if they cannot be
}

// get returns the histogram for CoreDNS's series obs in family, made the first time.
func (s *histSet) get(family string, obs prometheus.Observer, lo int32) *hist {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.m[obs]; h != nil {
		return h
	}
	if s.m == nil {
		s.m = map[prometheus.Observer]*hist{}
		if b, ok := readNativeBounds(); ok {
			s.keys = &b
		}
	}
	h := newHist(family, obs, lo, s.keys)
	s.m[obs] = h
	return h
}

// addTo adds every histogram's counts into its series among mfs, as a registry gathered them. A series no
// longer gathered (nothing deletes CoreDNS's) gets nothing.
func (s *histSet) addTo(mfs []*dto.MetricFamily) {
	s.mu.Lock()
	list := slices.Collect(maps.Values(s.m))
	s.mu.Unlock()
	families := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		families[mf.GetName()] = mf
	}
	for _, h := range list {
		mf := families[h.family]
		if mf == nil {
			continue
		}
		for _, m := range mf.Metric {
			if m.Histogram != nil && sameLabels(m.Label, h.labels) {
				h.addTo(m.Histogram)
				break
			}
		}
	}
}

func sameLabels(a, b []*dto.LabelPair) bool {
	return slices.EqualFunc(a, b, func(x, y *dto.LabelPair) bool {
		return x.GetName() == y.GetName() && x.GetValue() == y.GetValue()
	})
}
