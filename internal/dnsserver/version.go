package dnsserver

import "runtime/debug"

// CoreDNSVersion is the version of the embedded CoreDNS module, e.g. "v1.15.0".
func CoreDNSVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/coredns/coredns" {
				return m.Version
			}
		}
	}
	return "unknown"
}
