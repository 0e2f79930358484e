package dnsserver

import (
	"crypto/x509"
	"strings"
	"sync"

	"github.com/coredns/caddy/caddyfile"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image is one static binary on an empty base, with no system roots, so a Corefile that reaches a server
// over TLS (`forward . tls://…`, DNS over HTTPS or QUIC, a dnstap or trace endpoint) verifies it against root
// CAs compiled in (x/crypto's fallback bundle; Go uses them only where the system has none). They are parsed
// when the first such Corefile starts, not at every agent's start: importing x/crypto's fallback package
// parsed them at init, 5,000 objects on the live heap that every GC cycle marked, for the few clusters whose
// node cache talks TLS at all.
var installRoots = sync.OnceFunc(func() { x509.SetFallbackRoots(compiledRoots()) })

// compiledRoots is the fallback bundle as a pool, each root with the constraint the bundle gives it.
func compiledRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	for root := range bundle.Roots() {
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			continue // the bundle's tests parse every one; a root that did not parse verifies nothing
		}
		if root.Constraint != nil {
			pool.AddCertWithConstraint(cert, root.Constraint)
		} else {
			pool.AddCert(cert)
		}
	}
	return pool
}

// mayUseTLS reports whether any token of blocks (imported files included) names TLS, HTTPS or QUIC: an upstream
// scheme (tls://, https://, quic://), forward's tls and tls_servername options, dnstap's tls://, a trace
// endpoint over https. It errs towards yes (a zone containing "tls" counts): the cost of a wrong yes is the
// roots parsed, of a wrong no a server that does not verify.
func mayUseTLS(blocks []caddyfile.ServerBlock) bool {
	for _, b := range blocks {
		for _, tokens := range b.Tokens {
			for _, t := range tokens {
				text := strings.ToLower(t.Text)
				if strings.Contains(text, "tls") || strings.Contains(text, "https") || strings.Contains(text, "quic") {
					return true
				}
			}
		}
	}
	return false
}
