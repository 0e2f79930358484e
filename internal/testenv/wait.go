package testenv

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually looks: short beside any timeout a test uses, long enough not to compete for
// the CPU with what it waits for.
const pollEvery = 2 * time.Millisecond

// Eventually polls cond until it holds and returns how long that took, or fails t once timeout has passed,
// naming what it waited for. The timeout only bounds a failing test; a passing one returns as soon as cond holds.
// It is the one "wait until or time out" of the tests; prefer a readiness signal (a channel, a log line) where the
// code under test gives one.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(start)
}
