package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryBadValueIsOneLine holds the README's promise for every flag and file argument: a bad value is one line
// on stderr naming the flag and the value, exit status 2, nothing on stdout and nothing started. The flags are
// read from -help, so a flag added without a row here fails the test.
func TestEveryBadValueIsOneLine(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "Corefile.base")
	if err := os.WriteFile(base, []byte(".:53 {\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	// serve is a valid serving command line up to the files, to which each file row adds its one bad path.
	serve := []string{"-localip", "169.254.20.10", "-basecorefile", base, "-conf", filepath.Join(dir, "Corefile")}

	// flag -> a command line with a bad value for it, and the value the line must name.
	rows := map[string]struct {
		args  []string
		value string
	}{
		"basecorefile":              {[]string{"-localip", "169.254.20.10", "-basecorefile", missing}, missing},
		"conf":                      {append(serve, "-conf", filepath.Join(missing, "Corefile")), filepath.Join(missing, "Corefile")},
		"corefile":                  {[]string{"-localip", "169.254.20.10", "-basecorefile", base, "-corefile", filepath.Join(missing, "Corefile")}, filepath.Join(missing, "Corefile")},
		"dns.port":                  {[]string{"-localip", "169.254.20.10", "-dns.port", "70000"}, "70000"},
		"p":                         {[]string{"-localip", "169.254.20.10", "-p", "fifty"}, "fifty"},
		"fallback-lease":            {[]string{"-localip", "169.254.20.10", "-fallback-lease", "1s"}, "1s"},
		"foreign-drop-step-aside":   {[]string{"-localip", "169.254.20.10", "-foreign-drop-step-aside=maybe"}, "maybe"},
		"health-port":               {[]string{"-localip", "169.254.20.10", "-health-port", "0"}, "0"},
		"health-socket":             {append(serve, "-health-socket", filepath.Join(missing, "h.sock")), filepath.Join(missing, "h.sock")},
		"interfacename":             {[]string{"-localip", "169.254.20.10", "-interfacename", "a/b"}, "a/b"},
		"kube-dns-ip":               {[]string{"-localip", "169.254.20.10", "-kube-dns-ip", "kube-dns"}, "kube-dns"},
		"kubednscm":                 {append(serve, "-kubednscm", base), base}, // a file; a missing directory is fine (it may come later)
		"linklocal-fallback":        {[]string{"-localip", "169.254.20.10", "-linklocal-fallback=perhaps"}, "perhaps"},
		"localip":                   {[]string{"-localip", "169.254.20.300"}, "169.254.20.300"},
		"log-level":                 {[]string{"-localip", "169.254.20.10", "-log-level", "loud"}, "loud"},
		"metrics-listen-address":    {[]string{"-localip", "169.254.20.10", "-metrics-listen-address", "9353"}, "9353"},
		"pidfile":                   {append(serve, "-pidfile", filepath.Join(missing, "pid")), filepath.Join(missing, "pid")},
		"plugins":                   {[]string{"-plugins=often"}, "often"},
		"pod-identity":              {[]string{"-localip", "169.254.20.10", "-pod-identity=sometimes"}, "sometimes"},
		"top":                       {[]string{"-top=always"}, "always"},
		"json":                      {[]string{"-top", "-json=pretty"}, "pretty"},
		"top-n":                     {[]string{"-top", "-top-n", "many"}, "many"},
		"print-rules":               {[]string{"-print-rules=yes please"}, "yes please"},
		"probe":                     {[]string{"-probe", "/metrics", "-health-socket", "/run/h.sock"}, "/metrics"},
		"prometheus-listen-address": {[]string{"-localip", "169.254.20.10", "-prometheus-listen-address", ":http-alt"}, ":http-alt"},
		"quiet":                     {[]string{"-localip", "169.254.20.10", "-quiet=hush"}, "hush"},
		"reloadwithsignal":          {[]string{"-localip", "169.254.20.10", "-reloadwithsignal=2"}, "2"},
		"setupinterface":            {[]string{"-localip", "169.254.20.10", "-setupinterface=no way"}, "no way"},
		"setupiptables":             {[]string{"-localip", "169.254.20.10", "-setupiptables=nope"}, "nope"},
		"setupnftables":             {[]string{"-localip", "169.254.20.10", "-setupnftables=nah"}, "nah"},
		"skipteardown":              {[]string{"-localip", "169.254.20.10", "-skipteardown=later"}, "later"},
		"startup-taint":             {[]string{"-localip", "169.254.20.10", "-startup-taint", "not a key!"}, "not a key!"},
		"syncinterval":              {[]string{"-localip", "169.254.20.10", "-syncinterval", "often"}, "often"},
		"teardown":                  {[]string{"-teardown=soon"}, "soon"},
		"upstream-client-subnet":    {[]string{"-localip", "169.254.20.10", "-upstream-client-subnet=often"}, "often"},
		"upstreamsvc":               {[]string{"-localip", "169.254.20.10", "-upstreamsvc", "Kube_DNS"}, "Kube_DNS"},
		"version":                   {[]string{"-version=latest"}, "latest"},
	}

	var help, none bytes.Buffer
	if code := run([]string{"-help"}, &help, &none); code != 0 || none.Len() != 0 {
		t.Fatalf("-help: exit %d, stderr %q; want 0 and nothing on stderr", code, none.String())
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z.-]+)`).FindAllStringSubmatch(help.String(), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 30 {
		t.Fatalf("-help lists %d flags: %q", len(flags), flags)
	}
	for _, f := range flags {
		if _, ok := rows[f]; !ok {
			t.Errorf("flag -%s has no bad-value row: add one", f)
		}
	}
	for f, row := range rows {
		t.Run(f, func(t *testing.T) {
			if !slices.Contains(flags, f) {
				t.Fatalf("-help does not list -%s", f)
			}
			var stdout, stderr bytes.Buffer
			code := run(row.args, &stdout, &stderr)
			line := strings.TrimSuffix(stderr.String(), "\n")
			switch {
			case code != 2:
				t.Errorf("%q: exit %d, want 2; stderr %q", row.args, code, stderr.String())
			case stdout.Len() != 0:
				t.Errorf("%q: stdout %q, want nothing", row.args, stdout.String())
			case strings.Contains(line, "\n") || !strings.HasPrefix(line, "nodelocaldns: "):
				t.Errorf("%q: stderr %q, want one line starting nodelocaldns:", row.args, stderr.String())
			case !strings.Contains(line, "-"+f) || !strings.Contains(line, row.value):
				t.Errorf("%q: %q does not name -%s and %q", row.args, line, f, row.value)
			}
		})
	}
}

// TestHelp: -help is what was asked for, so it goes to stdout, and opens with how to call the agent, -localip
// marked required.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
			t.Fatalf("%s: exit %d, stderr %q; want 0 and nothing", arg, code, stderr.String())
		}
		out := stdout.String()
		if !strings.HasPrefix(out, "Usage: nodelocaldns -localip IP[,IP...] [flags]\n") {
			t.Errorf("%s: starts %q, want the usage line", arg, strings.SplitN(out, "\n", 2)[0])
		}
		if !regexp.MustCompile(`(?m)^  -localip string\n\s+\(required\)`).MatchString(out) {
			t.Errorf("%s: -localip not marked required:\n%s", arg, out)
		}
	}
}
