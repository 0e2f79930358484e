package desired

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

const testLease = 15 * time.Minute

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestFallbackVote: where the kube-dns ClusterIP comes from, why an instance wants no fallback, and where
// $KUBE_DNS_SERVICE_HOST is not taken: it never names a target beside the ClusterIP -localip intercepts (the
// fallback would cover that ClusterIP and send it elsewhere).
func TestFallbackVote(t *testing.T) {
	for _, tc := range []struct {
		name, flag, env, localip string
		off                      bool
		want, why                string // want "" : no vote
		disagree                 string // "env taken from", space-separated, comma between disagreements
	}{
		{name: "from the environment", env: "10.96.0.10", want: "10.96.0.10:53", why: "$KUBE_DNS_SERVICE_HOST"},
		{name: "the flag wins, and the environment's other word is said", flag: "10.96.0.20", env: "10.96.0.10", want: "10.96.0.20:53", why: "-kube-dns-ip",
			disagree: "10.96.0.10 10.96.0.20 -kube-dns-ip"},
		{name: "the environment agrees with -localip", env: "10.43.0.10", localip: "169.254.20.10,10.43.0.10", want: "10.43.0.10:53", why: "$KUBE_DNS_SERVICE_HOST"},
		{name: "a stale environment: -localip's ClusterIP, and the disagreement said", env: "10.96.0.66", localip: "169.254.20.10,10.96.0.10",
			want: "10.96.0.10:53", why: "-localip", disagree: "10.96.0.66 10.96.0.10 -localip"},
		{name: "the environment names the link-local address: -localip's ClusterIP", env: "169.254.20.10", localip: "169.254.20.10,10.96.0.10",
			want: "10.96.0.10:53", why: "-localip", disagree: "169.254.20.10 10.96.0.10 -localip"},
		{name: "the environment names a link-local address, IPVS mode: nothing to fall back to", env: "169.254.20.11", localip: "169.254.20.10",
			why: "names no one ClusterIP", disagree: "169.254.20.11 invalid IP -localip"},
		{name: "no variable: -localip's ClusterIP (a DNS Service of another name)", localip: "169.254.20.10,10.43.0.10", want: "10.43.0.10:53", why: "-localip"},
		{name: "no variable, IPVS mode's -localip", localip: "169.254.20.10", why: "KUBE_DNS_SERVICE_HOST is not set"},
		{name: "IPVS mode's -localip: the environment, which nothing contradicts", env: "10.96.0.10", localip: "169.254.20.10", want: "10.96.0.10:53", why: "$KUBE_DNS_SERVICE_HOST"},
		{name: "no variable, two ClusterIPs in -localip", localip: "169.254.20.10,10.43.0.10,10.43.0.11", why: "names no ClusterIP"},
		{name: "a stale environment beside two ClusterIPs in -localip: neither is covered, no fallback", env: "10.96.0.66", localip: "169.254.20.10,10.43.0.10,10.43.0.11",
			why: "names no one ClusterIP", disagree: "10.96.0.66 invalid IP -localip"},
		{name: "not an address", env: "kube-dns", why: "is not an IP address"},
		{name: "IPv6", env: "fd00:96::a", want: "[fd00:96::a]:53", why: "$KUBE_DNS_SERVICE_HOST"},
		{name: "IPv6, the environment agrees with -localip", env: "fd00:96::a", localip: "fd00::10,fd00:96::a", want: "[fd00:96::a]:53", why: "$KUBE_DNS_SERVICE_HOST"},
		{name: "IPv6, a stale environment: -localip is ambiguous, no fallback", env: "fd00:96::66", localip: "fd00::10,fd00:96::a",
			why: "names no one ClusterIP", disagree: "fd00:96::66 invalid IP -localip"},
		{name: "IPv6 with only a ULA in -localip: the flag names the ClusterIP", flag: "fd00:96::a", env: "fd00:96::a", localip: "fd00::10",
			want: "[fd00:96::a]:53", why: "-kube-dns-ip"},
		{name: "dual-stack flag", flag: "fd00:96::a,10.96.0.10", env: "10.96.0.20", want: "10.96.0.10:53,[fd00:96::a]:53", why: "-kube-dns-ip",
			disagree: "10.96.0.20 10.96.0.10 -kube-dns-ip"},
		{name: "dual-stack: the environment's family, -localip's other", env: "10.96.0.10", localip: "169.254.20.10,fd00::10,fe80::10",
			want: "10.96.0.10:53,[fd00::10]:53", why: "$KUBE_DNS_SERVICE_HOST and -localip"},
		{name: "IPv6 -localip with a local address and a ClusterIP: ambiguous", localip: "fd00::10,fd00:96::a", why: "names no ClusterIP"},
		{name: "switched off", env: "10.96.0.10", off: true, why: "-linklocal-fallback=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &options.Options{LinkLocalFallback: !tc.off, DNSPort: 53, FallbackLease: testLease}
			for _, ip := range strings.Split(tc.localip, ",") {
				if ip != "" {
					o.LocalIPs = append(o.LocalIPs, netip.MustParseAddr(ip))
				}
			}
			if tc.flag != "" {
				o.KubeDNSIPs = addrs(strings.Split(tc.flag, ",")...)
			}
			v := fallbackVote(o, tc.env)
			vote, why, dis := v.For, v.Why, v.Ignored
			if len(vote) > 0 {
				var s []string
				for _, v := range vote {
					s = append(s, v.String())
				}
				if got := strings.Join(s, ","); got != tc.want {
					t.Errorf("vote %s, want %s", got, tc.want)
				}
			} else if tc.want != "" {
				t.Errorf("no vote (%s), want %s", why, tc.want)
			}
			if !strings.Contains(why, tc.why) {
				t.Errorf("why %q, want it to say %q", why, tc.why)
			}
			var said []string
			for _, d := range dis {
				said = append(said, d.Env.String()+" "+d.Taken.String()+" "+d.From)
			}
			if got := strings.Join(said, ","); got != tc.disagree {
				t.Errorf("disagreements %q, want %q", got, tc.disagree)
			}
			// Where the environment disagrees, it covers no address -localip may intercept as a ClusterIP: the
			// fallback covers every local IP of a family it has a target for, but the targets (nft's
			// DecideFallback), so each such address must be a target.
			if tc.flag == "" && len(dis) > 0 {
				for _, ip := range o.LocalIPs {
					family := slices.ContainsFunc(vote, func(v netip.AddrPort) bool { return v.Addr().Is6() == ip.Is6() })
					target := slices.ContainsFunc(vote, func(v netip.AddrPort) bool { return v.Addr() == ip })
					if family && !target && !ip.IsLinkLocalUnicast() {
						t.Errorf("the fallback covers %v, which -localip may intercept as a ClusterIP", ip)
					}
				}
			}
		})
	}
}
