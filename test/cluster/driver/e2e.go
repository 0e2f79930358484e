package main

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// e2eFocus selects the DNS specs of Kubernetes' suite: "[sig-network] DNS …", "DNS HostNetwork …" and
// "DNS configMap nameserver …" (not "[Feature:PerformanceDNS]", which is another describe).
const e2eFocus = `\[sig-network\] DNS`

// e2eProcs is how many e2e.test processes share the specs. Most of a DNS spec's time is waiting (its pod's
// probes loop once a second, the suite polls every 5 s), so several share two cores well.
const e2eProcs = 4

// e2eSkips are the focused specs that cannot apply to this cluster, each with its reason (test/cluster/README.md
// keeps the same list).
var e2eSkips = []struct{ pattern, why string }{
	{`\[Provider:GCE\]`, "resolves google.com and GCE's metadata server: needs the internet and GCE (it skips itself elsewhere)"},
	{`DNS configMap nameserver`, "[Slow] [Serial]: each rewrites CoreDNS's own Corefile (kube-system/coredns) and expects names " +
		"outside the cluster to follow it; a node cache (node-cache too) sends those to the node's upstream and takes stub " +
		"domains from the kube-dns ConfigMap; the PTR case also needs the internet (8.8.8.8's PTR, dns.google)"},
}

// e2eSummary is one run's outcome, from the suite's JUnit report (the focused specs only) and its closing lines.
type e2eSummary struct {
	ran, passed, failed, skipped   int
	conformance, conformancePassed int
	failures                       []string
	ginkgo                         string // ginkgo's own "Ran N of M Specs …" and "… Passed | … Failed …" lines
	took                           time.Duration
	log, junit                     string
}

// runE2E runs e2e.test in node-1's namespaces against the cluster's admin kubeconfig, its log and JUnit report
// in dir. during, if set, runs beside it and is told to stop once the suite has ended; runE2E returns after it.
func runE2E(ctx context.Context, c *cluster, cc *conformanceConfig, dir string, during func(stop <-chan struct{})) (*e2eSummary, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// ginkgo runs the specs in e2eProcs processes of e2e.test (its flags before the binary, the suite's after --).
	args := []string{"--procs=" + strconv.Itoa(e2eProcs), "--focus=" + e2eFocus, "--no-color", "--timeout=40m"}
	for _, s := range e2eSkips {
		args = append(args, "--skip="+s.pattern)
		c.printf("   skip %s: %s\n", s.pattern, s.why)
	}
	args = append(args, filepath.Join(cc.e2e, "e2e.test"), "--",
		"--provider=skeleton",
		"--kubeconfig="+filepath.Join(c.state, "pki/admin.kubeconfig"),
		"--kubectl-path="+filepath.Join(c.cfg.k8sBin, "kubectl"),
		"--dns-domain="+clusterDomain,
		"--report-dir="+dir)
	logPath := filepath.Join(dir, "e2e.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "nsenter", c.local.nsenterArgs(filepath.Join(cc.e2e, "ginkgo"), args)...)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+cc.repoList, "HOME="+dir)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	c.printf("   ginkgo %s (log: %s)\n", strings.Join(args, " "), logPath)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		if during != nil {
			during(stop)
		}
	}()
	runErr := cmd.Wait()
	close(stop)
	<-done
	s, err := summarize(logPath, filepath.Join(dir, "junit_01.xml"))
	if err != nil {
		// No report: the suite did not get to its specs; its exit status and log tail say why.
		return nil, fmt.Errorf("%v (e2e.test: %v)\n%s", err, runErr, tail(logPath, 30))
	}
	s.took = time.Since(start)
	return s, nil
}

type junitReport struct {
	Suites []struct {
		Cases []struct {
			Name   string `xml:"name,attr"`
			Status string `xml:"status,attr"`
			// The e2e framework writes the failure's text, not its message attribute.
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// summarize counts the focused specs in the JUnit report (which lists every spec of the suite, the unfocused
// ones as skipped) and keeps ginkgo's closing lines from the log.
func summarize(logPath, junitPath string) (*e2eSummary, error) {
	b, err := os.ReadFile(junitPath)
	if err != nil {
		return nil, fmt.Errorf("JUnit report: %w", err)
	}
	var rep junitReport
	if err := xml.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("JUnit report %s: %w", junitPath, err)
	}
	focus := regexp.MustCompile(e2eFocus)
	s := &e2eSummary{log: logPath, junit: junitPath}
	for _, suite := range rep.Suites {
		for _, tc := range suite.Cases {
			if !focus.MatchString(tc.Name) {
				continue
			}
			conf := strings.Contains(tc.Name, "[Conformance]")
			switch tc.Status {
			case "passed":
				s.ran++
				s.passed++
				if conf {
					s.conformance++
					s.conformancePassed++
				}
			case "skipped", "pending":
				s.skipped++
			default: // failed, panicked, timedout, interrupted, aborted
				s.ran++
				s.failed++
				if conf {
					s.conformance++
				}
				msg := tc.Status
				if tc.Failure != nil {
					msg = firstLine(tc.Failure.Message + "\n" + tc.Failure.Text)
				}
				s.failures = append(s.failures, tc.Name+": "+msg)
			}
		}
	}
	if l, err := os.ReadFile(logPath); err == nil {
		for _, line := range strings.Split(string(l), "\n") {
			if strings.HasPrefix(line, "Ran ") || strings.Contains(line, " Passed | ") {
				s.ginkgo = strings.TrimSpace(s.ginkgo + " " + strings.TrimSpace(line))
			}
		}
	}
	return s, nil
}

// report records the run: its summary line, one case for the [Conformance] specs (every one ran and passed)
// and one for the others that ran.
func (s *e2eSummary) report(r *results) {
	r.printf("   summary %s: ran %d, passed %d, failed %d, skipped %d in %.0f s (ginkgo: %s)\n",
		r.mode, s.ran, s.passed, s.failed, s.skipped, s.took.Seconds(), s.ginkgo)
	r.figure("DNS specs: ran / passed / failed / skipped", "%d / %d / %d / %d", s.ran, s.passed, s.failed, s.skipped)
	r.figure("e2e.test wall time", "%.0f s", s.took.Seconds())
	var confErr, otherErr error
	var confFail, otherFail []string
	for _, f := range s.failures {
		if strings.Contains(f, "[Conformance]") {
			confFail = append(confFail, f)
		} else {
			otherFail = append(otherFail, f)
		}
	}
	if len(confFail) > 0 || s.conformance == 0 {
		confErr = fmt.Errorf("%d of %d [Conformance] DNS specs failed (log %s):\n%s", len(confFail), s.conformance, s.log, strings.Join(confFail, "\n"))
	}
	if len(otherFail) > 0 {
		otherErr = fmt.Errorf("%d failed (log %s):\n%s", len(otherFail), s.log, strings.Join(otherFail, "\n"))
	}
	r.check("every [Conformance] DNS spec passes", fmt.Sprintf("%d of %d", s.conformancePassed, s.conformance), confErr)
	r.check("the other DNS specs that ran pass", fmt.Sprintf("%d of %d", s.passed-s.conformancePassed, s.ran-s.conformance), otherErr)
}

// firstLine is a failure's first non-empty line, cut to a line of the log.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

// tail returns the last n lines of a file, for an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
