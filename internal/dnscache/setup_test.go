package dnscache

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	_ "github.com/coredns/coredns/plugin/cache" // the reference: registers "cache" at init
)

// The `cache` directive's options, one table each, with the inputs of CoreDNS 1.15's own setup tests
// (plugin/cache/setup_test.go) and a case for every error its parser returns. Each case says what ours parses
// (every option, not only the one under test, so an option that leaks into another shows) or the exact error,
// and every case is also given to CoreDNS's setup: the two must accept the same inputs and fail with the same
// text. CoreDNS's parsed values are unexported; what they do is the differential test's.

// opts is every option the parser sets.
type opts struct {
	zones                                 []string
	pcap, ncap                            int
	pttl, minpttl, nttl, minnttl, failttl time.Duration
	prefetch                              int
	duration                              time.Duration
	percentage                            int
	staleUpTo                             time.Duration
	verifyStale                           bool
	verifyTimeout, staleTTL, staleRecheck time.Duration
	preferPositive                        bool
	pexcept, nexcept                      []string
	keepttl                               bool
}

func optionsOf(c *Cache) opts {
	return opts{zones: c.Zones, pcap: c.pcap, ncap: c.ncap, pttl: c.pttl, minpttl: c.minpttl, nttl: c.nttl,
		minnttl: c.minnttl, failttl: c.failttl, prefetch: c.prefetch, duration: c.duration, percentage: c.percentage,
		staleUpTo: c.staleUpTo, verifyStale: c.verifyStale, verifyTimeout: c.verifyTimeout, staleTTL: c.staleTTL,
		staleRecheck: c.staleRecheck, preferPositive: c.preferPositive, pexcept: c.pexcept, nexcept: c.nexcept,
		keepttl: c.keepttl}
}

// coreDNSDefaults are CoreDNS 1.15's (plugin/cache/cache.go New, plugin/pkg/dnsutil's TTLs), written out rather
// than read from New, so that a changed default fails here.
var coreDNSDefaults = opts{zones: []string{"."}, pcap: 10000, ncap: 10000, pttl: time.Hour, minpttl: 5 * time.Second,
	nttl: 30 * time.Minute, minnttl: 5 * time.Second, failttl: 5 * time.Second, duration: time.Minute, percentage: 10}

// setupCase is one input: a whole directive, or (without a leading "cache") the lines of a cache block. want
// changes the defaults into what it parses to; err is the parser's error instead.
type setupCase struct {
	in   string
	want func(*opts)
	err  string
}

func (tc setupCase) directive() string {
	if strings.HasPrefix(tc.in, "cache") {
		return tc.in
	}
	return "cache {\n" + tc.in + "\n}"
}

// argErr is caddy's error for a wrong argument count at line of the block, after token.
func argErr(line, token string) string {
	return "Testfile:" + line + " - Error during parsing: Wrong argument count or unexpected line ending after '" + token + "'"
}

const atoiAAA = `strconv.Atoi: parsing "aaa": invalid syntax`

func runSetupCases(t *testing.T, cases []setupCase) {
	t.Helper()
	ref, err := caddy.DirectiveAction("dns", "cache")
	if err != nil {
		t.Fatalf("coredns's cache plugin is not linked in: %v", err)
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.in, "\n", "; "), func(t *testing.T) {
			c := caddy.NewTestController("dns", tc.directive())
			c.ServerBlockKeys = []string{"."}
			ca, err := Parse(c)
			switch {
			case tc.err != "" && err == nil:
				t.Errorf("parsed, want error %q", tc.err)
			case tc.err != "" && err.Error() != tc.err:
				t.Errorf("error %q, want %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want it parsed", err)
			case tc.err == "":
				want := coreDNSDefaults
				if tc.want != nil {
					tc.want(&want)
				}
				if got := optionsOf(ca); !reflect.DeepEqual(got, want) {
					t.Errorf("parsed to\n%+v\nwant\n%+v", got, want)
				}
			}
			ours, theirs := setupError(Setup(nil), tc.directive()), setupError(ref, tc.directive())
			if ours != theirs {
				t.Errorf("setup error %q, coredns's cache plugin's %q", ours, theirs)
			}
			if want := setupWant(tc.err); ours != want {
				t.Errorf("setup error %q, want %q (the parser's, as a plugin error)", ours, want)
			}
		})
	}
}

func setupError(setup caddy.SetupFunc, directive string) string {
	c := caddy.NewTestController("dns", directive)
	c.ServerBlockKeys = []string{"."}
	if err := setup(c); err != nil {
		return err.Error()
	}
	return ""
}

func setupWant(parseErr string) string {
	if parseErr == "" {
		return ""
	}
	return "plugin/cache: " + parseErr
}

func TestSetupDirective(t *testing.T) {
	runSetupCases(t, []setupCase{
		{in: "cache"},
		// caddy's lexer reads "{}" as one token: a zone, in both parsers (CoreDNS's test only asks for no error).
		{in: "cache {}", want: func(o *opts) { o.zones = []string{"{}."} }},
		{in: "cache {\n}"},
		{in: "cache 25", want: func(o *opts) { o.pttl, o.nttl = 25*time.Second, 25*time.Second }},
		{in: "cache aaa example.nl", want: func(o *opts) { o.zones = []string{"aaa.", "example.nl."} }},
		{in: "cache 25 example.nl", want: func(o *opts) {
			o.zones, o.pttl, o.nttl = []string{"example.nl."}, 25*time.Second, 25*time.Second
		}},
		{in: "cache 0 example.nl", err: "cache TTL can not be zero or negative: 0"},
		{in: "cache -1 example.nl", err: "cache TTL can not be zero or negative: -1"},
		{in: "cache\ncache", err: plugin.ErrOnce.Error()},
		{in: "positive 15\nnegative aaa", err: argErr("2", "positive")},
	})
}

func TestSetupSuccessDenial(t *testing.T) {
	runSetupCases(t, []setupCase{
		{in: "success 10", want: func(o *opts) { o.pcap = 10 }},
		{in: "success 10 1800 30", want: func(o *opts) { o.pcap, o.pttl, o.minpttl = 10, 1800*time.Second, 30*time.Second }},
		{in: "success 10 1800 0", want: func(o *opts) { o.pcap, o.pttl, o.minpttl = 10, 1800*time.Second, 0 }},
		// Arguments past MINTTL are not looked at, by CoreDNS's parser either.
		{in: "success 10 1800 30 99", want: func(o *opts) { o.pcap, o.pttl, o.minpttl = 10, 1800*time.Second, 30*time.Second }},
		{in: "success 10\ndenial 10 15", want: func(o *opts) { o.pcap, o.ncap, o.nttl = 10, 10, 15*time.Second }},
		{in: "success 10\ndenial 10 15 2", want: func(o *opts) { o.pcap, o.ncap, o.nttl, o.minnttl = 10, 10, 15*time.Second, 2*time.Second }},
		{in: "cache 25 example.nl {\nsuccess 10\ndenial 10 15 5\n}", want: func(o *opts) {
			o.zones, o.pcap, o.ncap, o.pttl, o.nttl, o.minnttl = []string{"example.nl."}, 10, 10, 25*time.Second, 15*time.Second, 5*time.Second
		}},
		{in: "success\ndenial 10 15", err: argErr("2", "success")},
		{in: "denial", err: argErr("2", "denial")},
		{in: "success 15\ndenial aaa", err: atoiAAA},
		{in: "success aaa", err: atoiAAA},
		{in: "success 10 aaa", err: atoiAAA},
		{in: "denial 10 15 aaa", err: atoiAAA},
		{in: "success 10 0", err: "cache TTL can not be zero or negative: 0"},
		{in: "denial 10 -5", err: "cache TTL can not be zero or negative: -5"},
		{in: "success 10 30 -1", err: "cache min TTL can not be negative: -1"},
		{in: "denial 10 30 -1", err: "cache min TTL can not be negative: -1"},
	})
}

func TestSetupPrefetch(t *testing.T) {
	runSetupCases(t, []setupCase{
		{in: "prefetch 10", want: func(o *opts) { o.prefetch = 10 }},
		{in: "prefetch 0", want: func(o *opts) { o.prefetch = 0 }},
		{in: "prefetch 2 10m", want: func(o *opts) { o.prefetch, o.duration = 2, 10*time.Minute }},
		{in: "prefetch 2 10m 50%", want: func(o *opts) { o.prefetch, o.duration, o.percentage = 2, 10*time.Minute, 50 }},
		{in: "prefetch 2 1m 10%", want: func(o *opts) { o.prefetch, o.percentage = 2, 10 }},
		{in: "prefetch 2 1m 90%", want: func(o *opts) { o.prefetch, o.percentage = 2, 90 }},
		{in: "prefetch", err: argErr("2", "prefetch")},
		{in: "prefetch 1 1m 10% 4", err: argErr("2", "4")},
		{in: "prefetch aaa", err: atoiAAA},
		{in: "prefetch -1", err: "prefetch amount should be positive: -1"},
		{in: "positive 0\nprefetch -1", err: argErr("2", "positive")},
		{in: "prefetch 0 blurp", err: `time: invalid duration "blurp"`},
		{in: "prefetch 1 1m 50", err: "last character of percentage should be `%`, but is: '0'"},
		{in: "prefetch 1 1m aaa%", err: atoiAAA},
		{in: "prefetch 1 1m 9%", err: "percentage should fall in range [10, 90]: 9"},
		{in: "prefetch 1 1m 91%", err: "percentage should fall in range [10, 90]: 91"},
	})
}

func TestSetupServeStale(t *testing.T) {
	stale := func(upTo time.Duration, verify bool, timeout, ttl, recheck time.Duration) func(*opts) {
		return func(o *opts) {
			o.staleUpTo, o.verifyStale, o.verifyTimeout, o.staleTTL, o.staleRecheck = upTo, verify, timeout, ttl, recheck
		}
	}
	h, s30 := time.Hour, 30*time.Second
	runSetupCases(t, []setupCase{
		{in: "serve_stale", want: stale(h, false, 0, 0, 0)},
		{in: "serve_stale 20m", want: stale(20*time.Minute, false, 0, 0, 0)},
		{in: "serve_stale 1h20m", want: stale(80*time.Minute, false, 0, 0, 0)},
		{in: "serve_stale 0m", want: stale(0, false, 0, 0, 0)},
		{in: "serve_stale 0", want: stale(0, false, 0, 0, 0)},
		{in: "serve_stale 0 verify", want: stale(0, true, 0, 0, 0)},
		{in: "serve_stale 0 immediate", want: stale(0, false, 0, 0, 0)},
		{in: "serve_stale 0 VERIFY", want: stale(0, true, 0, 0, 0)},
		{in: "serve_stale 1h immediate 30s", want: stale(h, false, 0, s30, 0)},
		{in: "serve_stale 1h immediate 30s 30s", want: stale(h, false, 0, s30, s30)},
		{in: "serve_stale 1h immediate 0 0", want: stale(h, false, 0, 0, 0)},
		{in: "serve_stale 1h immediate 4294967295s", want: stale(h, false, 0, time.Duration(^uint32(0))*time.Second, 0)},
		{in: "serve_stale 1h immediate 0", want: stale(h, false, 0, 0, 0)},
		{in: "serve_stale 1h verify 100ms", want: stale(h, true, 100*time.Millisecond, 0, 0)},
		{in: "serve_stale 1h verify 100ms 30s", want: stale(h, true, 100*time.Millisecond, s30, 0)},
		{in: "serve_stale 1h verify 100ms 30s 30s", want: stale(h, true, 100*time.Millisecond, s30, s30)},
		{in: "serve_stale 1h verify 100ms 30s 250ms", want: stale(h, true, 100*time.Millisecond, s30, 250*time.Millisecond)},
		{in: "serve_stale 1h verify 0 0 5m", want: stale(h, true, 0, 0, 5*time.Minute)},
		{in: "serve_stale 1h verify 0", want: stale(h, true, 0, 0, 0)},
		{in: "serve_stale 1h verify 0 1m", want: stale(h, true, 0, time.Minute, 0)},
		{in: "serve_stale 1h VERIFY 250ms", want: stale(h, true, 250*time.Millisecond, 0, 0)},
		// A second serve_stale starts from the defaults again, in both parsers.
		{in: "serve_stale 1h verify 100ms 30s 30s\nserve_stale 5m", want: stale(5*time.Minute, false, 0, 0, 0)},

		{in: "serve_stale 20", err: `time: missing unit in duration "20"`},
		{in: "serve_stale -20m", err: "invalid negative duration for serve_stale"},
		{in: "serve_stale aa", err: `time: invalid duration "aa"`},
		{in: "serve_stale 1m nono", err: "invalid value for serve_stale refresh mode: nono"},
		{in: "serve_stale 0 after nono", err: "invalid value for serve_stale refresh mode: after"},
		{in: "serve_stale 1h verify 1s 1s 1s 1s", err: argErr("2", "1s")},
		{in: "serve_stale 1h immediate 100ms", err: "serve_stale response TTL must be a whole number of seconds"},
		{in: "serve_stale 1h immediate 4294967296s", err: "serve_stale response TTL exceeds the DNS TTL range"},
		{in: "serve_stale 1h immediate -1s", err: "invalid negative response TTL for serve_stale"},
		{in: "serve_stale 1h immediate garbage", err: `invalid serve_stale response TTL: time: invalid duration "garbage"`},
		{in: "serve_stale 1h immediate 30s extra", err: `invalid serve_stale failure recheck: time: invalid duration "extra"`},
		{in: "serve_stale 1h immediate 30s 30s extra", err: argErr("2", "extra")},
		{in: "serve_stale 1h immediate 30s -1s", err: "invalid negative failure recheck for serve_stale"},
		{in: "serve_stale 1h immediate 30s 5m1s", err: "serve_stale failure recheck cannot exceed 5 minutes"},
		{in: "serve_stale 1h immediate 30s invalid", err: `invalid serve_stale failure recheck: time: invalid duration "invalid"`},
		{in: "serve_stale 1h verify -1ms", err: "invalid negative timeout for serve_stale verify"},
		{in: "serve_stale 1h verify garbage", err: `invalid serve_stale verify timeout: time: invalid duration "garbage"`},
		{in: "serve_stale 1h verify 100ms 500ms", err: "serve_stale response TTL must be a whole number of seconds"},
		{in: "serve_stale 1h verify 100ms -1s", err: "invalid negative response TTL for serve_stale"},
		{in: "serve_stale 1h verify 100ms garbage", err: `invalid serve_stale response TTL: time: invalid duration "garbage"`},
		{in: "serve_stale 1h verify 100ms 30s extra", err: `invalid serve_stale failure recheck: time: invalid duration "extra"`},
		{in: "serve_stale 1h verify 100ms 30s -1s", err: "invalid negative failure recheck for serve_stale"},
		{in: "serve_stale 1h verify 100ms 30s 30s extra", err: argErr("2", "extra")},
	})
}

func TestSetupServeStalePolicy(t *testing.T) {
	preferred := func(o *opts) { o.staleUpTo, o.preferPositive = time.Hour, true }
	runSetupCases(t, []setupCase{
		{in: "serve_stale\nserve_stale_policy prefer_positive", want: preferred},
		{in: "serve_stale_policy PREFER_POSITIVE\nserve_stale", want: preferred},
		{in: "serve_stale", want: func(o *opts) { o.staleUpTo = time.Hour }},
		{in: "serve_stale_policy prefer_positive", err: "serve_stale_policy requires serve_stale"},
		{in: "serve_stale\nserve_stale_policy", err: argErr("3", "serve_stale_policy")},
		{in: "serve_stale\nserve_stale_policy prefer_positive extra", err: argErr("3", "extra")},
		{in: "serve_stale\nserve_stale_policy invalid", err: "invalid serve_stale_policy: invalid"},
		{in: "serve_stale\nserve_stale_policy prefer_positive\nserve_stale_policy prefer_positive",
			err: "serve_stale_policy can only be specified once"},
	})
}

func TestSetupServfail(t *testing.T) {
	runSetupCases(t, []setupCase{
		{in: "servfail 1s", want: func(o *opts) { o.failttl = time.Second }},
		{in: "servfail 5m", want: func(o *opts) { o.failttl = 5 * time.Minute }},
		{in: "servfail 0s", want: func(o *opts) { o.failttl = 0 }},
		{in: "servfail 0", want: func(o *opts) { o.failttl = 0 }},
		{in: "servfail", err: argErr("2", "servfail")},
		{in: "servfail 1m invalid", err: argErr("2", "invalid")},
		{in: "servfail 6m", err: "caching SERVFAIL responses over 5 minutes is not permitted"},
		{in: "servfail 20", err: `time: missing unit in duration "20"`},
		{in: "servfail -1s", err: "invalid negative ttl for servfail"},
		{in: "servfail aa", err: `time: invalid duration "aa"`},
	})
}

func TestSetupDisable(t *testing.T) {
	two := []string{"example.com.", "example.org."}
	runSetupCases(t, []setupCase{
		{in: "disable denial example.com example.org", want: func(o *opts) { o.nexcept = two }},
		{in: "disable success example.com example.org", want: func(o *opts) { o.pexcept = two }},
		{in: "disable denial", want: func(o *opts) { o.nexcept = []string{"."} }},
		{in: "disable success", want: func(o *opts) { o.pexcept = []string{"."} }},
		{in: "disable denial example.com example.org\ndisable success example.com example.org",
			want: func(o *opts) { o.nexcept, o.pexcept = two, two }},
		{in: "disable", err: argErr("2", "disable")},
		{in: "disable invalid example.com example.org", err: `cache type for disable must be "success" or "denial"`},
	})
}

func TestSetupKeepttl(t *testing.T) {
	runSetupCases(t, []setupCase{
		{in: "keepttl", want: func(o *opts) { o.keepttl = true }},
		{in: "keepttl arg1", err: argErr("2", "arg1")},
	})
}
