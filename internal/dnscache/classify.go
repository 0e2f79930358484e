package dnscache

import (
	"strings"
	"time"

	"github.com/coredns/coredns/plugin/pkg/response"
	"github.com/miekg/dns"
)

// What a response is to the cache, as CoreDNS 1.15's cache plugin classifies it: the rules on which responses
// are cached at all, and on NODATA hidden behind a CNAME chain (RFC 2308 sections 1, 2.2 and 5; RFC 1034
// section 3.6.2; RFC 2181 section 10.1).

// cacheable reports whether m may be stored under its question, once classified as t.
func cacheable(m *dns.Msg, t response.Type) bool {
	switch {
	case m.Truncated || len(m.Question) == 0:
		return false
	case t == response.OtherError || t == response.Meta || t == response.Update:
		return false
	case t == response.NameError && !hasSOA(m):
		return false // a negative TTL needs an SOA
	case t == response.NoError && !hasSOA(m) && isNODATA(m):
		// A CNAME chain that does not reach the type and carries no SOA: an incomplete answer, not cached.
		return false
	}
	return true
}

func hasSOA(m *dns.Msg) bool {
	for _, r := range m.Ns {
		if r.Header().Rrtype == dns.TypeSOA {
			return true
		}
	}
	return false
}

// responseType is response.Typify, with NOERROR that does not answer its question but carries an SOA
// classified as NODATA.
func responseType(m *dns.Msg, now time.Time) response.Type {
	t, _ := response.Typify(m, now)
	if t == response.NoError && hasSOA(m) && isNODATA(m) {
		return response.NoData
	}
	return t
}

// isNODATA reports whether a non-empty answer section does not answer the question. An empty one does not
// count: data outside the answer section (whoami's) is a positive answer.
func isNODATA(m *dns.Msg) bool { return len(m.Answer) > 0 && !answersQuestion(m) }

// usableAnswer reports whether m is a complete positive response that answers its question.
func usableAnswer(m *dns.Msg, now time.Time) bool {
	return m != nil && !m.Truncated && responseType(m, now) == response.NoError && answersQuestion(m)
}

// answersQuestion reports whether a NOERROR response holds a record of the queried type at the end of the
// CNAME chain from the question's name (for ANY: any record at the name; for CNAME: the name's one target).
func answersQuestion(m *dns.Msg) bool {
	if m == nil || m.Rcode != dns.RcodeSuccess || len(m.Question) == 0 || len(m.Answer) == 0 {
		return false
	}
	q := m.Question[0]
	switch q.Qtype {
	case dns.TypeANY:
		for _, r := range m.Answer {
			if h := r.Header(); inClass(h.Class, q.Qclass) && strings.EqualFold(h.Name, q.Name) {
				return true
			}
		}
		return false
	case dns.TypeCNAME:
		target, ok := cnameOf(m.Answer, q.Name, q.Qclass)
		return ok && target != ""
	}
	name, ok := chainEnd(m.Answer, q.Name, q.Qclass)
	if !ok {
		return false
	}
	for _, r := range m.Answer {
		if h := r.Header(); h.Rrtype == q.Qtype && inClass(h.Class, q.Qclass) && strings.EqualFold(h.Name, name) {
			return true
		}
	}
	return false
}

func inClass(rr, q uint16) bool { return q == dns.ClassANY || rr == q }

// chainEnd follows the CNAMEs from name to the name that has none. A loop or an alias with two targets has
// no end: false.
func chainEnd(answer []dns.RR, name string, qclass uint16) (string, bool) {
	seen := map[string]bool{}
	for {
		key := strings.ToLower(name)
		if seen[key] {
			return name, false
		}
		seen[key] = true
		target, ok := cnameOf(answer, name, qclass)
		if !ok {
			return name, false
		}
		if target == "" {
			return name, true
		}
		name = target
	}
}

// cnameOf is owner's CNAME target ("" if none); false when owner has two different ones.
func cnameOf(answer []dns.RR, owner string, qclass uint16) (string, bool) {
	target := ""
	for _, r := range answer {
		c, ok := r.(*dns.CNAME)
		if !ok || !inClass(c.Hdr.Class, qclass) || !strings.EqualFold(c.Hdr.Name, owner) {
			continue
		}
		if target != "" && !strings.EqualFold(target, c.Target) {
			return "", false
		}
		target = c.Target
	}
	return target, true
}
