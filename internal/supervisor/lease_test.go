package supervisor

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// The lease is an abstract unix socket: no file, no netlink, nothing outside this process's names. Each test
// uses its own name so tests and parallel runs never meet.
var leaseSeq atomic.Int64

func testLeaseName(t *testing.T) string {
	return fmt.Sprintf("@nodelocaldns-test/%d/%d/%s", os.Getpid(), leaseSeq.Add(1), t.Name())
}

func mustLead(t *testing.T, name string) *lease {
	t.Helper()
	l, ok, err := tryAcquireLease(name)
	if err != nil || !ok {
		t.Fatalf("tryAcquireLease(%s) = %v, %v; want the lease", name, ok, err)
	}
	t.Cleanup(l.release)
	return l
}

func mustFollow(t *testing.T, name string) *follower {
	t.Helper()
	f, err := follow(name)
	if err != nil {
		t.Fatalf("follow(%s): %v", name, err)
	}
	return f
}

func TestLeaseIsExclusive(t *testing.T) {
	name := testLeaseName(t)
	l := mustLead(t, name)
	if _, ok, err := tryAcquireLease(name); ok || err != nil {
		t.Fatalf("second tryAcquireLease = %v, %v; want taken", ok, err)
	}
	l.release()
	mustLead(t, name)
}

// A successor that follow returned for is counted by the leader already: no window in which the leader would
// tear down under a successor that said ready.
func TestFollowIsCountedBeforeItReturns(t *testing.T) {
	name := testLeaseName(t)
	l := mustLead(t, name)
	if l.handOver() {
		t.Fatal("handOver with no successor = true")
	}
	mustFollow(t, name)
	if !l.handOver() {
		t.Fatal("handOver right after follow returned = false")
	}
}

func TestFollowWithoutLeaderFails(t *testing.T) {
	if _, err := follow(testLeaseName(t)); err == nil {
		t.Fatal("follow with nobody holding the lease succeeded")
	}
}

func TestSuccessorTakesOverOnRelease(t *testing.T) {
	name := testLeaseName(t)
	l := mustLead(t, name)
	f := mustFollow(t, name)
	done := make(chan bool, 1)
	go func() { done <- f.wait(context.Background()) }()
	select {
	case <-done:
		t.Fatal("wait returned while the leader holds the lease")
	case <-time.After(50 * time.Millisecond):
	}
	l.release()
	select {
	case gone := <-done:
		if !gone {
			t.Fatal("wait = false after release, want true")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("wait did not return after the leader released")
	}
	mustLead(t, name)
}

func TestWaitStopsWithContext(t *testing.T) {
	name := testLeaseName(t)
	mustLead(t, name)
	f := mustFollow(t, name)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if f.wait(ctx) {
		t.Fatal("wait with a cancelled context = true")
	}
}

// Exactly one of leader and successor tears down when both stop during a handover, whatever the order.
func TestLeaveDecidesWhoTearsDown(t *testing.T) {
	t.Run("successor leaves first: the leader keeps it", func(t *testing.T) {
		name := testLeaseName(t)
		l := mustLead(t, name)
		f := mustFollow(t, name)
		if yours, gone := f.leave(); yours || gone {
			t.Fatalf("leave = yours %v, leaderGone %v; want neither", yours, gone)
		}
		eventually(t, func() bool { return !l.handOver() })
	})
	t.Run("leader handed over first: the successor gets it", func(t *testing.T) {
		name := testLeaseName(t)
		l := mustLead(t, name)
		f := mustFollow(t, name)
		if !l.handOver() {
			t.Fatal("handOver = false with a successor")
		}
		if yours, gone := f.leave(); !yours || gone {
			t.Fatalf("leave = yours %v, leaderGone %v; want yours", yours, gone)
		}
	})
	t.Run("leader already released: whoever takes the lease", func(t *testing.T) {
		name := testLeaseName(t)
		l := mustLead(t, name)
		f := mustFollow(t, name)
		l.handOver()
		l.release()
		time.Sleep(20 * time.Millisecond)
		if yours, gone := f.leave(); yours || !gone {
			t.Fatalf("leave = yours %v, leaderGone %v; want leaderGone", yours, gone)
		}
		mustLead(t, name)
	})
	t.Run("two successors: the one leaving keeps nothing", func(t *testing.T) {
		name := testLeaseName(t)
		l := mustLead(t, name)
		f1 := mustFollow(t, name)
		mustFollow(t, name)
		if !l.handOver() {
			t.Fatal("handOver = false with successors")
		}
		if yours, gone := f1.leave(); yours || gone {
			t.Fatalf("leave = yours %v, leaderGone %v; want neither while another successor serves", yours, gone)
		}
	})
}

// A successor that dies without a word is no longer counted.
func TestDeadSuccessorIsNotCounted(t *testing.T) {
	name := testLeaseName(t)
	l := mustLead(t, name)
	f := mustFollow(t, name)
	f.conn.Close()
	eventually(t, func() bool { return !l.handOver() })
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 2s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
