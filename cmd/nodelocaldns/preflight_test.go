package main

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/preflight"
)

// -print-rules ends with the preflight on stderr, one line each, naming what the node lacks.
func TestPrintPreflight(t *testing.T) {
	node := fakeNode(preflight.CapSocket)
	var stderr bytes.Buffer
	printPreflight(&stderr, node.Check([]netip.Addr{netip.MustParseAddr("169.254.20.10")}))
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "nodelocaldns: preflight: MISSING socket: ") ||
		lines[1] != "nodelocaldns: preflight: kernel 6.6.0-azl3 lacks socket; has owner-flag, conntrack, ipv6-rewrite" {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// fakeNode is a node whose kernel has every capability but those missing, and IPv6.
func fakeNode(missing ...string) preflight.Node {
	return preflight.Node{
		Release: func() (string, error) { return "6.6.0-azl3", nil },
		Try: func() ([]preflight.Tried, error) {
			var out []preflight.Tried
			for _, c := range preflight.Capabilities() {
				p := preflight.Tried{Capability: c, Present: !slices.Contains(missing, c.Name)}
				if !p.Present {
					p.Refusal = syscall.ENOENT
				}
				out = append(out, p)
			}
			return out, nil
		},
		ReadFile: func(string) ([]byte, error) { return []byte("0\n"), nil },
	}
}
