package fairshare

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

func TestSetup(t *testing.T) {
	for _, tc := range []struct{ in, wantErr string }{
		{"fairshare 250", ""},
		{"fairshare 250\nfairshare 9", ""},
		{"fairshare", "Wrong argument count"},
		{"fairshare 1 2", "Wrong argument count"},
		{"fairshare abc", `LIMIT "abc" is not a positive number`},
		{"fairshare 0", `LIMIT "0" is not a positive number`},
		{"fairshare 5 {\n wait 1s\n}", `unknown property "wait"`},
	} {
		err := Setup(nil)(caddy.NewTestController("dns", tc.in))
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Setup(%q) = %v; want an error containing %q", tc.in, err, tc.wantErr)
		}
	}
}
