package corefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// kube-dns ConfigMap keys (file names in the mounted volume) that node-cache reads. Every other key, including
// `federations`, is ignored, as in kubernetes-sigs/node-local-dns.
const (
	keyStubDomains         = "stubDomains"
	keyUpstreamNameservers = "upstreamNameservers"
)

// KubeDNSKeys are the kube-dns ConfigMap keys that LoadKubeDNS reads; a change to any other cannot change the
// Corefile.
func KubeDNSKeys() []string { return []string{keyStubDomains, keyUpstreamNameservers} }

// KubeDNS is the part of the kube-dns ConfigMap that shapes the Corefile. The zero value means "no ConfigMap":
// no stub domains, upstreams from /etc/resolv.conf. Values returned by [LoadKubeDNS] are validated and canonical.
type KubeDNS struct {
	// StubDomains maps a domain to the nameservers that serve it, e.g. {"acme.local": ["1.2.3.4", "5.6.7.8:5353"]}.
	StubDomains map[string][]string
	// UpstreamNameservers replaces /etc/resolv.conf for the "." block: at most 3 servers.
	UpstreamNameservers []string
}

// parseKubeDNS decodes and validates the ConfigMap keys; where names a key in errors (its file path).
func parseKubeDNS(files map[string][]byte, where func(key string) string) (KubeDNS, error) {
	var raw KubeDNS
	if data, ok := files[keyStubDomains]; ok {
		if err := decodeJSON(data, &raw.StubDomains); err != nil {
			return KubeDNS{}, fmt.Errorf("%s: %w", where(keyStubDomains), err)
		}
	}
	if data, ok := files[keyUpstreamNameservers]; ok {
		if err := decodeJSON(data, &raw.UpstreamNameservers); err != nil {
			return KubeDNS{}, fmt.Errorf("%s: %w", where(keyUpstreamNameservers), err)
		}
	}
	return raw.canonical(where)
}

// decodeJSON decodes one ConfigMap value. An empty (or all-blank) value is the same as an absent key.
func decodeJSON(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errors.New("not valid UTF-8")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := checkDuplicateKeys(data); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return nil
}

// checkDuplicateKeys refuses a JSON object that names a key twice: encoding/json would silently keep the last one,
// so an operator's first entry would vanish without a word. Syntax errors are left to json.Unmarshal.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("invalid JSON: duplicate key %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// canonical validates k and returns a copy with every server in canonical form. Domains are checked in sorted
// order so the same bad ConfigMap always yields the same error.
func (k KubeDNS) canonical(where func(key string) string) (KubeDNS, error) {
	var out KubeDNS
	domains := make([]string, 0, len(k.StubDomains))
	for d := range k.StubDomains {
		domains = append(domains, d)
	}
	slices.Sort(domains)
	for _, d := range domains {
		if err := checkDomain(d); err != nil {
			return KubeDNS{}, fmt.Errorf("%s: domain %q: %w", where(keyStubDomains), d, err)
		}
		servers, err := canonicalServers(k.StubDomains[d], maxStubServers)
		if err != nil {
			return KubeDNS{}, fmt.Errorf("%s: domain %q: %w", where(keyStubDomains), d, err)
		}
		if out.StubDomains == nil {
			out.StubDomains = map[string][]string{}
		}
		out.StubDomains[d] = servers
	}
	if len(k.UpstreamNameservers) > 0 {
		servers, err := canonicalServers(k.UpstreamNameservers, maxUpstreamNameservers)
		if err != nil {
			return KubeDNS{}, fmt.Errorf("%s: %w", where(keyUpstreamNameservers), err)
		}
		out.UpstreamNameservers = servers
	}
	return out, nil
}

func canonicalServers(in []string, limit int) ([]string, error) {
	if len(in) == 0 {
		return nil, errors.New("no nameservers")
	}
	if len(in) > limit {
		return nil, fmt.Errorf("%d nameservers, at most %d allowed", len(in), limit)
	}
	out := make([]string, 0, len(in))
	for _, s := range in {
		c, err := canonicalServer(s)
		if err != nil {
			return nil, fmt.Errorf("nameserver %q: %w", s, err)
		}
		out = append(out, c)
	}
	return out, nil
}
