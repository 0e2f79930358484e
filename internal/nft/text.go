package nft

import (
	"fmt"
	"strconv"
	"strings"
)

// Text prints r as table inet table in nft syntax: loadable with `nft -f`, and byte for byte what
// `nft -s list table inet <table>` prints for it (-s: counters without their values). The table is a
// parameter because a Ruleset does not know which instance name the kernel will give it ([TableName] for the
// first instance, `nodelocaldns-1` for a second). The layout, including how nft wraps set elements, follows
// nft's own printer (src/expression.c, calculate_delim).
func (r *Ruleset) Text(table string) string {
	var b strings.Builder
	// nft prints the owner flag, and after it the owning process as a comment on the first line
	// ("{ # progname nodelocaldns}"), which depends on who lists: comparisons strip that comment.
	fmt.Fprintf(&b, "table inet %s {\n\tflags owner\n", table)
	sep := "\n"
	for _, s := range r.Sets {
		b.WriteString(sep)
		sep = "\n"
		writeSet(&b, s)
	}
	for _, c := range r.Chains {
		b.WriteString(sep)
		sep = "\n"
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Hook != "" {
			fmt.Fprintf(&b, "\t\ttype filter hook %s priority %s; policy accept;\n", c.Hook, priorityName(c.Hook, c.Priority))
		}
		for _, rule := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", rule)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func writeSet(b *strings.Builder, s Set) {
	fmt.Fprintf(b, "\tset %s {\n", s.Name)
	if s.IPv6 {
		b.WriteString("\t\ttype ipv6_addr\n")
	} else {
		b.WriteString("\t\ttype ipv4_addr\n")
	}
	if len(s.Elements) > 0 {
		// nft breaks the line after every second IPv4 element and after every IPv6 element.
		perLine := 2
		if s.IPv6 {
			perLine = 1
		}
		b.WriteString("\t\telements = { ")
		for i, ip := range s.Elements {
			if i > 0 {
				if i%perLine == 0 {
					b.WriteString(",\n\t\t\t     ")
				} else {
					b.WriteString(", ")
				}
			}
			b.WriteString(ip.String())
		}
		b.WriteString(" }\n")
	}
	b.WriteString("\t}\n")
}

// String prints the rule as nft lists it.
func (r Rule) String() string {
	l3, set := "ip", r.set()
	if r.IPv6 {
		l3 = "ip6"
	}
	addr, port := "daddr", "dport"
	if r.Dir == DirFrom {
		addr, port = "saddr", "sport"
	}
	gate := ""
	if r.Gate != GateNone {
		gate = " socket " + string(r.Gate) + " 0"
	}
	verdict := string(r.Verdict)
	if r.Verdict == VerdictMarkTaken {
		verdict = setMarkField(markTaken).text
	}
	return fmt.Sprintf("%s %s @%s %s %s %d%s counter %s comment %q", l3, addr, set, r.Proto, port, r.Port, gate, verdict, r.Comment)
}

// priorityName is how nft lists a priority of the inet family: by the standard name within 10 of it
// ("raw - 1"), else as a number. srcnat is a name only on postrouting (nft's std_prio_table).
func priorityName(h Hook, p int32) string {
	names := []namedPriority{{"raw", priorityRaw}, {"mangle", priorityMangle}, {"filter", priorityFilter}}
	if h == HookPostrouting {
		names = append(names, namedPriority{"srcnat", prioritySrcNAT})
	}
	for _, n := range names {
		switch d := p - n.prio; {
		case d == 0:
			return n.name
		case d > 0 && d <= 10:
			return n.name + " + " + strconv.Itoa(int(d))
		case d < 0 && d >= -10:
			return n.name + " - " + strconv.Itoa(int(-d))
		}
	}
	return strconv.Itoa(int(p))
}

type namedPriority struct {
	name string
	prio int32
}
