package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// NftApply runs `nft -f -` with ruleset (a fixture: kube-proxy's DNAT, a host firewall) and fails the test on
// error, showing the input.
func NftApply(t testing.TB, ruleset string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f -: %v\n%s\ninput:\n%s", err, out, ruleset)
	}
}
