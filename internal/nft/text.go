package nft

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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
		writeChain(&b, c)
	}
	b.WriteString("}\n")
	return b.String()
}

// writeChain prints a chain of either table as nft lists it.
func writeChain[R tableRule](b *strings.Builder, c Chain[R]) {
	fmt.Fprintf(b, "\tchain %s {\n", c.Name)
	if c.Hook != "" {
		fmt.Fprintf(b, "\t\ttype %s hook %s priority %s; policy accept;\n", c.chainType(), c.Hook, priorityName(c.Hook, c.Priority))
	}
	for _, r := range c.Rules {
		fmt.Fprintf(b, "\t\t%s\n", r)
	}
	b.WriteString("\t}\n")
}

func writeSet(b *strings.Builder, s Set) {
	fmt.Fprintf(b, "\tset %s {\n", s.Name)
	if s.Concat {
		writePairs(b, s)
		return
	}
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

// writePairs prints a concatenated set's type and elements, one per line as nft lists them (in the kernel's
// order, which for a hash set is its hash's: comparisons with a listing sort the element lines).
func writePairs(b *strings.Builder, s Set) {
	if s.IPv6 {
		b.WriteString("\t\ttype ipv6_addr . inet_service\n")
	} else {
		b.WriteString("\t\ttype ipv4_addr . inet_service\n")
	}
	timeout := ""
	if s.Timeout > 0 {
		b.WriteString("\t\tflags timeout\n")
		timeout = " timeout " + nftDuration(s.Timeout)
	}
	for i, p := range s.Pairs {
		if i == 0 {
			b.WriteString("\t\telements = { ")
		} else {
			b.WriteString(",\n\t\t\t     ")
		}
		fmt.Fprintf(b, "%s . %d%s", p.Addr(), p.Port(), timeout)
	}
	if len(s.Pairs) > 0 {
		b.WriteString(" }\n")
	}
	b.WriteString("\t}\n")
}

// nftDuration is a timeout as nft prints it: days, hours, minutes, seconds and milliseconds, each only when
// not zero ("1h30m5s", "15m", "500ms").
func nftDuration(d time.Duration) string {
	var b strings.Builder
	ms := d.Milliseconds()
	for _, u := range []struct {
		name string
		ms   int64
	}{{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}} {
		if n := ms / u.ms; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			ms -= n * u.ms
		}
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

// String prints the rule as nft lists it.
func (r Rule) String() string { return fmt.Sprintf("%s comment %q", stmtsText(r.stmts()), r.Comment) }

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
