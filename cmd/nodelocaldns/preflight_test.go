package main

import (
	"strings"
	"testing"
)

func TestPreflightLine(t *testing.T) {
	for _, tc := range []struct{ release, want string }{
		{"5.10.0-21-amd64", "FAIL: kernel 5.10.0-21-amd64 is older than 5.12"},
		{"4.19.0", "FAIL"},
		{"5.11.22", "FAIL"},
		{"5.12.0", "ok"},
		{"5.15.0-91-generic", "ok"},
		{"6.1.0-18-amd64", "ok"},
		{"6", "version not understood"},
	} {
		got := preflightLine(tc.release)
		if !strings.Contains(got, tc.want) {
			t.Errorf("preflightLine(%q) = %q, want it to contain %q", tc.release, got, tc.want)
		}
		if strings.Contains(got, "FAIL") && !strings.Contains(got, "invalid argument") {
			t.Errorf("preflightLine(%q) = %q: does not say what the agent's error looks like", tc.release, got)
		}
	}
}
