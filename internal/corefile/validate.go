package corefile

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/parse"
	"github.com/coredns/coredns/plugin/pkg/transport"
	"github.com/miekg/dns"
)

// corefileName is the file name caddyfile puts in its errors ("Corefile:12 - Error during parsing: ...").
const corefileName = "Corefile"

// Validate checks a Corefile the way CoreDNS reads it before any plugin runs, without starting anything:
// caddyfile syntax against directives, the directive list the CoreDNS that will serve it parses with
// (dnsserver.Directives: an unknown directive is an error), each server block key as
// dnsserver.InspectServerBlocks parses it, and no zone served twice on the same transport, port and address
// (CoreDNS's "cannot serve ... - it is already defined"), which is how a stub domain equal to a zone of the base
// would fail. Plugin arguments are left to the plugins' own setup when the server starts. Errors carry line
// numbers.
func Validate(corefile []byte, directives []string) error {
	_, err := validate(corefile, directives, "")
	return err
}

// validate is Validate returning the server blocks; dnsPort, when known, is the port of keys without one
// (CoreDNS's -dns.port), so that "a" and "a:53" are the same server.
func validate(corefile []byte, directives []string, dnsPort string) ([]caddyfile.ServerBlock, error) {
	if len(directives) == 0 {
		// caddyfile would call every directive unknown: say what is actually wrong.
		return nil, errors.New("no directive list to validate against")
	}
	blocks, err := caddyfile.Parse(corefileName, bytes.NewReader(corefile), directives)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, errors.New("no server blocks")
	}
	lines, err := scanKeys(corefile)
	if err != nil {
		return nil, err
	}
	seen := zoneSet{}
	for _, b := range blocks {
		// A block filtered by `view` may share its zone with another: CoreDNS checks only unfiltered ones.
		_, filtered := b.Tokens["view"]
		addrs := bindAddrs(b)
		for _, k := range b.Keys {
			line := lines.find(k)
			zones, err := parseKey(k, dnsPort)
			if err != nil {
				return nil, fmt.Errorf("%s server block key %q: %w", at(line), k, err)
			}
			if filtered {
				continue
			}
			for _, z := range zones {
				for _, a := range addrs {
					z.addr = a
					if err := seen.add(z, line); err != nil {
						return nil, fmt.Errorf("%s %w", at(line), err)
					}
				}
			}
		}
	}
	return blocks, nil
}

func at(line int) string {
	if line == 0 {
		return corefileName + ":"
	}
	return fmt.Sprintf("%s:%d:", corefileName, line)
}

// zoneAddr is what CoreDNS keys a server on (core/dnsserver/address.go).
type zoneAddr struct{ transport, zone, port, addr string }

func (z zoneAddr) String() string {
	port := z.port
	if port == "" {
		port = "<-dns.port>"
	}
	s := z.transport + "://" + z.zone + ":" + port
	if z.addr != "" {
		s += " on " + z.addr
	}
	return s
}

// parseKey reads a server block key as dnsserver.InspectServerBlocks does, including the expansion of a reverse
// CIDR into its in-addr.arpa zones. A DNS key without a port is on dnsPort ("" when unknown).
func parseKey(k, dnsPort string) ([]zoneAddr, error) {
	trans, rest := parse.Transport(k)
	hosts, port, err := plugin.SplitHostPort(rest)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		if _, _, err := plugin.SplitHostPort(dns.Fqdn(h)); err != nil {
			return nil, err
		}
	}
	if port == "" {
		port = map[string]string{transport.DNS: dnsPort, transport.TLS: transport.TLSPort, transport.QUIC: transport.QUICPort,
			transport.GRPC: transport.GRPCPort, transport.HTTPS: transport.HTTPSPort, transport.HTTPS3: transport.HTTPSPort}[trans]
	}
	zones := make([]zoneAddr, 0, len(hosts))
	for _, h := range hosts {
		zones = append(zones, zoneAddr{transport: trans, zone: plugin.Name(h).Normalize(), port: port})
	}
	return zones, nil
}

// bindAddrs returns the block's bind arguments (before any `except`), IPs in canonical form, or [""] for a block
// without bind, which listens on every address. Interface names stay names: an overlap through them is left to
// CoreDNS.
func bindAddrs(b caddyfile.ServerBlock) []string {
	var addrs []string
	d := caddyfile.NewDispenserTokens(corefileName, b.Tokens["bind"])
	for d.Next() {
		for _, a := range d.RemainingArgs() {
			if a == "except" {
				break
			}
			if ip, err := netip.ParseAddr(a); err == nil {
				a = ip.String()
			}
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return []string{""}
	}
	return addrs
}

// zoneSet mirrors CoreDNS's zoneOverlap: the same key twice is "already defined", and an unbound key overlaps
// every bound key of the same zone, port and transport.
type zoneSet map[zoneAddr]int

func (s zoneSet) add(z zoneAddr, line int) error {
	if prev, ok := s[z]; ok {
		return fmt.Errorf("cannot serve %s - it is already defined%s", z, onLine(prev))
	}
	unbound := z
	unbound.addr = ""
	for other, prev := range s {
		o := other
		o.addr = ""
		if o == unbound && (z.addr == "") != (other.addr == "") {
			return fmt.Errorf("cannot serve %s - zone overlap listener capacity with %s%s", z, other, onLine(prev))
		}
	}
	s[z] = line
	return nil
}

func onLine(line int) string {
	if line == 0 {
		return ""
	}
	return fmt.Sprintf(" (line %d)", line)
}

// keyLines finds the line of each server block key, in file order (caddyfile.ServerBlock keeps none).
type keyLines struct {
	toks   []caddyfile.Token
	cursor int
}

// scanKeys walks the tokens once, recording the candidate keys (tokens outside any braces) and checking that the
// braces balance. caddyfile accepts a server block left open at end of file when its last token is the '}' of a
// nested block; CoreDNS would then run a block the operator did not write, and text appended after it (our stub
// blocks) would be read as its directives.
func scanKeys(corefile []byte) (*keyLines, error) {
	kl := &keyLines{}
	var open []int // lines of the unclosed '{'
	d := caddyfile.NewDispenser(corefileName, bytes.NewReader(corefile))
	for d.Next() {
		switch v := d.Val(); {
		case v == "{":
			open = append(open, d.Line())
		case v == "}":
			if len(open) == 0 {
				return nil, fmt.Errorf("%s '}' without a matching '{'", at(d.Line()))
			}
			open = open[:len(open)-1]
		case len(open) == 0:
			kl.toks = append(kl.toks, caddyfile.Token{Text: strings.TrimSuffix(v, ","), Line: d.Line()})
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("%s '{' is never closed", at(open[len(open)-1]))
	}
	return kl, nil
}

// find returns the line of the next key k, or 0 when it cannot be placed (imports, env references).
func (kl *keyLines) find(k string) int {
	for i := kl.cursor; i < len(kl.toks); i++ {
		if kl.toks[i].Text == k {
			kl.cursor = i + 1
			return kl.toks[i].Line
		}
	}
	return 0
}
