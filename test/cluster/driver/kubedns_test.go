package main

import "testing"

func TestRequestsTotal(t *testing.T) {
	// As CoreDNS 1.1x's prometheus plugin writes it: one series per server, zone, proto, family and type.
	exp := `# HELP coredns_dns_requests_total Counter of DNS requests made per zone, protocol and family.
# TYPE coredns_dns_requests_total counter
coredns_dns_requests_total{family="1",proto="tcp",server="dns://:53",type="A",view="",zone="."} 4512
coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="NS",view="",zone="."} 3
coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="other",view="",zone="."} 1.5e+01
coredns_dns_request_duration_seconds_count{server="dns://:53",type="A",view="",zone="."} 9999
coredns_dns_requests_total_other 7
`
	got, err := requestsTotal(exp)
	if err != nil || got != 4530 {
		t.Fatalf("requestsTotal = %v, %v; want 4530", got, err)
	}
	if got, err := requestsTotal("# nothing yet\n"); err != nil || got != 0 {
		t.Fatalf("no series: %v, %v; want 0", got, err)
	}
	if _, err := requestsTotal(`coredns_dns_requests_total{zone="."} x`); err == nil {
		t.Fatal("a bad value was taken")
	}
}

func TestHasIP(t *testing.T) {
	rules := "ip daddr 10.96.0.10 dnat ip to 10.244.0.50 . 53\nchain endpoint-X-kube-system/kube-dns/tcp/dns-tcp__10.244.1.7/53 {"
	for ip, want := range map[string]bool{"10.244.0.50": true, "10.244.0.5": false, "10.244.1.7": true, "10.244.1.70": false, "0.244.1.7": false} {
		if got := hasIP(rules, ip); got != want {
			t.Errorf("hasIP(%s) = %v, want %v", ip, got, want)
		}
	}
}

func TestSharesEven(t *testing.T) {
	pods := []kubeDNSPod{{name: "a"}, {name: "b"}, {name: "c"}}
	for _, tc := range []struct {
		delta []float64
		ok    bool
	}{
		{[]float64{1500, 1500, 1500}, true},
		{[]float64{2170, 1165, 1165}, true},  // 48.2%: within 15 points of 33.3%
		{[]float64{2180, 1160, 1160}, false}, // 48.4%
		{[]float64{4500, 0, 0}, false},
		{[]float64{800, 0, 150}, false}, // too few to say
	} {
		err := shares{pods: pods, delta: tc.delta}.even()
		if (err == nil) != tc.ok {
			t.Errorf("%v: even() = %v, want ok %v", tc.delta, err, tc.ok)
		}
	}
}
