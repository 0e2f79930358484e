package desired

import "strings"

// tableFlags are the flags that change an instance's table (its sets, its chains, its rules' ports and
// gates), each with the values worth telling apart; "" is the flag left out. The kernel's nft_socket, the
// other thing that changes it, is a fact ([Facts.NoSocket]).
func tableFlags() [][]string {
	return [][]string{
		{"", "-setupnftables=false"},
		{"", "-setupinterface=false"},
		{"-localip=169.254.20.10,10.96.0.10", "-localip=fd00::10", "-localip=169.254.20.10,fd00::10,10.96.0.10"},
		{"", "-linklocal-fallback=false"},
		{"", "-dns.port=1053 -health-port=9090 -kube-dns-ip=10.96.0.20"},
	}
}

// Combinations is every combination of the flags that change the table, each as command-line arguments
// (for a serving agent; add -print-rules or -teardown for those modes): what a test of the modes'
// agreement walks.
func Combinations() [][]string {
	out := [][]string{nil}
	for _, values := range tableFlags() {
		var next [][]string
		for _, args := range out {
			for _, v := range values {
				next = append(next, append(append([]string(nil), args...), strings.Fields(v)...))
			}
		}
		out = next
	}
	return out
}
