package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunRefuses: flag mistakes are usage errors (exit 2) that name the flag and the bad value.
func TestRunRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no binary", nil, "no -binary"},
		{"no arch", []string{"-binary", "out/nodelocaldns"}, `invalid value "out/nodelocaldns" for flag -binary: want GOARCH=PATH`},
		{"arch twice", []string{"-binary", "arm64=a", "-binary", "arm64=b"}, "arm64 given twice (a and b)"},
		{"bad epoch", []string{"-binary", "amd64=a", "-created", "yesterday"}, `invalid value "yesterday" for flag -created`},
		{"argument", []string{"-binary", "amd64=a", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
			}
		})
	}
}
