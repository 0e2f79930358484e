package main

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// iptRule is one of node-cache's rules, as node-cache's initIptables lists them (NODE-CACHE.md 1.7).
type iptRule struct {
	table, chain string
	args         []string
}

const (
	commentSkip  = "NodeLocal DNS Cache: skip conntrack"
	commentAllow = "NodeLocal DNS Cache: allow DNS traffic"
)

// nodeCacheRules are node-cache's 12 rules per listen IP.
func nodeCacheRules(ips []netip.Addr, dnsPort, healthPort uint16) []iptRule {
	dp, hp := strconv.Itoa(int(dnsPort)), strconv.Itoa(int(healthPort))
	var out []iptRule
	for _, ip := range ips {
		a := ip.String()
		r := func(table, chain, proto, dir, addr, portFlag, port, target, comment string) iptRule {
			return iptRule{table, chain, []string{"-p", proto, dir, addr, portFlag, port, "-j", target, "-m", "comment", "--comment", comment}}
		}
		for _, p := range []string{"tcp", "udp"} {
			out = append(out,
				r("raw", "PREROUTING", p, "-d", a, "--dport", dp, "NOTRACK", commentSkip),
				r("filter", "INPUT", p, "-d", a, "--dport", dp, "ACCEPT", commentAllow),
				r("raw", "OUTPUT", p, "-s", a, "--sport", dp, "NOTRACK", commentSkip),
				r("filter", "OUTPUT", p, "-s", a, "--sport", dp, "ACCEPT", commentAllow),
				r("raw", "OUTPUT", p, "-d", a, "--dport", dp, "NOTRACK", commentSkip),
			)
		}
		out = append(out,
			r("raw", "OUTPUT", "tcp", "-d", a, "--dport", hp, "NOTRACK", commentSkip),
			r("raw", "OUTPUT", "tcp", "-s", a, "--sport", hp, "NOTRACK", commentSkip),
		)
	}
	return out
}

// iptables is node-cache's way of running the command (k8s.io/kubernetes/pkg/util/iptables): one process per
// operation, waiting up to 5 s for the xtables lock. It counts the processes it started.
type iptables struct{ execs int }

// run returns whether the command succeeded; a failing -C is how "rule absent" is reported.
func (x *iptables) run(op string, r iptRule) (bool, error) {
	x.execs++
	args := append([]string{"-w", "5", "-t", r.table, op, r.chain}, r.args...)
	out, err := exec.Command("iptables", args...).CombinedOutput()
	if err == nil {
		return true, nil
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && (op == "-C" || op == "-D") {
		return false, nil
	}
	return false, fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
}

// ensure is utiliptables.EnsureRule(Prepend): -C, and -I when absent. It reports whether the rule existed.
func (x *iptables) ensure(r iptRule) (bool, error) {
	ok, err := x.run("-C", r)
	if err != nil || ok {
		return ok, err
	}
	_, err = x.run("-I", r)
	return false, err
}

// delete is utiliptables.DeleteRule: -C, and -D when present.
func (x *iptables) delete(r iptRule) error {
	ok, err := x.run("-C", r)
	if err != nil || !ok {
		return err
	}
	_, err = x.run("-D", r)
	return err
}

// setup is node-cache's initial sync: EnsureRule for every rule.
func (x *iptables) setup(rules []iptRule) error {
	for _, r := range rules {
		if _, err := x.ensure(r); err != nil {
			return err
		}
	}
	return nil
}

// teardown is node-cache's TeardownNetworking: delete until EnsureRule has to re-add the rule (all
// duplicates gone), then delete once more.
func (x *iptables) teardown(rules []iptRule) error {
	for _, r := range rules {
		for exists := true; exists; {
			if err := x.delete(r); err != nil {
				return err
			}
			var err error
			if exists, err = x.ensure(r); err != nil {
				return err
			}
		}
		if err := x.delete(r); err != nil {
			return err
		}
	}
	return nil
}
