package link

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"go.uber.org/zap/zaptest"
)

// vmEnv is set by the kernel-matrix VM's init (test/kernel/init.sh): tests gated on it expect a stock distro kernel
// with the production dummy kind, and must never run on the host.
const vmEnv = "NODELOCALDNS_VM"

func requireVM(t *testing.T) {
	t.Helper()
	if os.Getenv(vmEnv) != "1" {
		t.Skipf("skipping: runs only inside the kernel-matrix VM (%s=1, set by `make test-kernel`)", vmEnv)
	}
	testenv.RequireRoot(t)
}

// TestVMDummyEnsureAndRepair proves the production path: the probe picks dummy (no fallback), Ensure creates a
// dummy link UP with the listen IPs, and Watch driving Ensure repairs it after someone deletes it.
func TestVMDummyEnsureAndRepair(t *testing.T) {
	requireVM(t)
	m := kernelManager(t)
	if m.Kind() != KindDummy {
		t.Fatalf("Kind() = %q on the stock kernel, want %q (no fallback)", m.Kind(), KindDummy)
	}
	s := testSpec()
	if _, err := m.Ensure(s); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	wantKernelState(t, m, KindDummy)

	ctx, cancel := context.WithCancel(context.Background())
	repaired := make(chan time.Time, 16)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		_ = Watch(ctx, zaptest.NewLogger(t), s.Name, func(string) {
			if changes, err := m.Ensure(s); err == nil && len(changes) > 0 {
				repaired <- time.Now()
			}
		})
	}()
	// Watch calls trigger on its own goroutine, so once it has returned no Ensure pass is in flight.
	stopWatch := func() { cancel(); <-watching }
	defer stopWatch()
	// Let the subscriptions come up: poll by deleting until a repair is seen (the first delete may race them).
	deadline := time.Now().Add(6 * triggerLatency())
	for {
		start := time.Now()
		ip(t, "link", "del", s.Name)
		select {
		case at := <-repaired:
			stopWatch() // the pass our own create triggers must not change the link under the checks below
			t.Logf("dummy link deleted -> repaired after %v", at.Sub(start))
			wantKernelState(t, m, KindDummy)
			return
		case <-time.After(triggerLatency()):
		}
		if time.Now().After(deadline) {
			t.Fatal("link not repaired after deletion")
		}
		if _, err := m.Ensure(s); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
}
