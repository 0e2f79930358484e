package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// -teardown that leaves something behind exits non-zero, and its log names what was left.
func TestTeardownExitCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"clean", nil, 0},
		{"interface left", errors.New(`teardown incomplete: interface "nodelocaldns" left in place: operation not permitted`), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log, err := newLogger("info", &out)
			if err != nil {
				t.Fatal(err)
			}
			got := teardown(&options.Options{}, log, func(*options.Options, *zap.Logger) error { return tc.err })
			if got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
			if tc.err != nil && !strings.Contains(out.String(), `interface \"nodelocaldns\" left in place`) {
				t.Errorf("log does not name what was left:\n%s", out.String())
			}
		})
	}
}
