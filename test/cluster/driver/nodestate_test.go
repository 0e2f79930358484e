package main

import "testing"

// A table listed by nft with kube-proxy's stale (flushed) service chains reads as the table without them.
func TestWithoutStaleChains(t *testing.T) {
	without := "table ip kube-proxy {\n\tchain service-AB-default/x/tcp/p {\n\t\tcounter\n\t}\n}\n"
	for _, with := range []string{
		"table ip kube-proxy {\n\tchain service-KX-kube-system/kube-dns-upstream/tcp/dns-tcp {\n\t}\n\n\tchain service-AB-default/x/tcp/p {\n\t\tcounter\n\t}\n}\n",
		"table ip kube-proxy {\n\tchain service-AB-default/x/tcp/p {\n\t\tcounter\n\t}\n\n\tchain endpoint-KX-kube-system/kube-dns-upstream/tcp/dns-tcp__10.0.0.1/53 {\n\t}\n}\n",
	} {
		if got := withoutStaleChains(with); got != without {
			t.Errorf("withoutStaleChains(%q) = %q, want %q", with, got, without)
		}
	}
	// A chain with rules stays, whatever its name.
	if got := withoutStaleChains(without); got != without {
		t.Errorf("a live chain changed: %q", got)
	}
}
