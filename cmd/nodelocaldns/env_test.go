package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpListsTheEnvironment(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	usage := stdout.String() // -h is what was asked for: stdout
	for _, want := range []string{"-localip", "Environment:", "NODELOCALDNS_FASTPATH", "NODELOCALDNS_TUNING", "_SERVICE_HOST"} {
		if !strings.Contains(usage, want) {
			t.Errorf("-h does not mention %s:\n%s", want, usage)
		}
	}
}
