package main

import (
	"slices"
	"testing"
	"time"
)

// TestInFlight: a load's losses pass as "in flight" only when they fall into the instants allowed and each
// instant lost no more than was in flight there, judged by the load's own answers' lag around it.
func TestInFlight(t *testing.T) {
	// times: n failures from ms on, step ms apart.
	times := func(ms, n, step int64) []int64 {
		var out []int64
		for i := range n {
			out = append(out, ms+i*step)
		}
		return out
	}
	// lag: LagMs for a 25 s load whose answers took ms in the second sec and 5 ms elsewhere.
	lag := func(sec int, ms int64) []int64 {
		out := make([]int64, 25)
		for i := range out {
			out[i] = 5
		}
		out[sec] = ms
		return out
	}
	join := func(a, b []int64) []int64 { return append(append([]int64{}, a...), b...) }
	for _, c := range []struct {
		name string
		fail []int64
		bad  int
		lag  []int64
		n    int
		want bool
	}{
		{"nothing lost", nil, 0, nil, 1, true},
		{"one lost", []int64{5000}, 0, lag(5, 3), 1, true},
		{"10 within 250 ms", times(5000, 10, 20), 0, nil, 1, true},
		{"11 within 250 ms", times(5000, 11, 20), 0, nil, 1, false},
		{"3 over 400 ms, answers prompt", times(5000, 3, 200), 0, lag(5, 20), 1, false},
		{"3 over 400 ms, answers 500 ms late there", times(5000, 3, 200), 0, lag(5, 500), 1, true},
		{"3 over 400 ms, answers late the second before", times(5100, 3, 200), 0, lag(4, 500), 1, true},
		{"3 over 400 ms, answers late only long before", times(9000, 3, 200), 0, lag(4, 500), 1, false},
		{"30 over 290 ms, answers 500 ms late (35 allowed)", times(5000, 30, 10), 0, lag(5, 500), 1, true},
		{"40 over 390 ms, answers 500 ms late (35 allowed)", times(5000, 40, 10), 0, lag(5, 500), 1, false},
		{"two instants 3 s apart, one allowed", join(times(5000, 2, 10), times(8000, 2, 10)), 0, lag(5, 500), 1, false},
		{"two instants 3 s apart, two allowed", join(times(5000, 2, 10), times(8000, 2, 10)), 0, lag(5, 500), 2, true},
		{"a wrong answer", nil, 1, nil, 1, false},
	} {
		l := loadResult{Sent: 2500, Rate: 100, Failed: len(c.fail), Bad: c.bad, FailMs: c.fail, LagMs: c.lag, FirstMs: -1, LastMs: -1}
		for _, ms := range c.fail {
			if l.FirstMs < 0 || ms < l.FirstMs {
				l.FirstMs = ms
			}
			l.LastMs = max(l.LastMs, ms)
		}
		if got := l.inFlightAt(c.n); got != c.want {
			t.Errorf("%s: inFlightAt(%d) = %v, want %v (%s)", c.name, c.n, got, c.want, l)
		}
	}
	// More losses than the load lists (it lists the first maxFailTimes): never only what was in flight.
	l := loadResult{Sent: 2500, Rate: 100, Failed: 65, FailMs: times(5000, 64, 1), LagMs: lag(5, 2000), FirstMs: 5000, LastMs: 5064}
	if l.inFlightAt(2) {
		t.Errorf("65 lost, 64 listed: inFlightAt(2) = true, want false")
	}
}

// TestLocalInFlightAfterAGracefulStop: the host-network client's load may lose at one instant more after a
// graceful stop (the interface goes: addressGone), and only it, and only then.
func TestLocalInFlightAfterAGracefulStop(t *testing.T) {
	prompt := make([]int64, 25)
	for i := range prompt {
		prompt[i] = 5
	}
	twoInstants := loadResult{Sent: 1109, OK: 1106, Failed: 3, FirstMs: 2600, LastMs: 2870,
		FailMs: []int64{2600, 2610, 2870}, Rate: 50, LagMs: prompt}
	oneInstant := loadResult{Sent: 1109, OK: 1108, Failed: 1, FirstMs: 2600, LastMs: 2600, FailMs: []int64{2600},
		Rate: 50, LagMs: prompt}
	host := loadKey(hostLoad.pod, localDNSIP, "udp")
	pod := loadKey("dns-client", localDNSIP, "udp")
	for _, c := range []struct {
		name     string
		res      map[string]loadResult
		graceful bool
		ok       bool
	}{
		{"host network, two instants, graceful stop", map[string]loadResult{host: twoInstants, pod: oneInstant}, true, true},
		{"host network, two instants, SIGKILL", map[string]loadResult{host: twoInstants, pod: oneInstant}, false, false},
		{"pod, two instants, graceful stop", map[string]loadResult{host: oneInstant, pod: twoInstants}, true, false},
	} {
		if err := localInFlight("a stop", c.res, c.graceful); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// TestLostNothingAfter: a stopped agent's losses pass when every one was sent before the kill, or in flight at
// it, wherever the kill fell, and over TCP at one instant more (the restart); others after it do not.
func TestLostNothingAfter(t *testing.T) {
	start := int64(1_000_000)
	kill := time.UnixMilli(start + 19_000) // 19 s into the load
	span := func(from, to, step int64) []int64 {
		var out []int64
		for ms := from; ms <= to; ms += step {
			out = append(out, ms)
		}
		return out
	}
	blackholed := span(2400, 18_900, 20) // from the stop to the kill, 50 a second
	with := func(more ...int64) []int64 { return append(append([]int64{}, blackholed...), more...) }
	for _, c := range []struct {
		name  string
		fail  []int64
		bad   int
		lagMs int64
		tcp   bool
		want  bool
	}{
		{"losses end before the kill", blackholed, 0, 5, false, true},
		{"the last in flight at the kill", with(19_200), 0, 5, false, true},
		{"one sent 400 ms after the kill", with(19_400), 0, 5, false, false},
		{"one 400 ms after, answers 500 ms late there", with(19_400), 0, 500, false, true},
		{"one at the restart over TCP", with(30_000), 0, 5, true, true},
		{"one at the restart over UDP", with(30_000), 0, 5, false, false},
		{"TCP losses at two instants after the kill", with(25_000, 30_000), 0, 5, true, false},
		{"a wrong answer", blackholed, 1, 5, false, false},
	} {
		lag := make([]int64, 60)
		for i := range lag {
			lag[i] = c.lagMs
		}
		l := loadResult{Failed: len(c.fail), FailMs: c.fail, FirstMs: c.fail[0], LastMs: slices.Max(c.fail), Bad: c.bad,
			StartMs: start, LagMs: lag, Rate: 50}
		if err := l.lostNothingAfter(kill, c.tcp); (err == nil) != c.want {
			t.Errorf("%s: %v, want pass %v", c.name, err, c.want)
		}
	}
	if err := (loadResult{Failed: 1, LastMs: 100, FailMs: []int64{100}}).lostNothingAfter(kill, false); err == nil {
		t.Error("a load that did not say when it started passed")
	}
	if err := (loadResult{Failed: 2, LastMs: 100, FailMs: []int64{100}, StartMs: start}).lostNothingAfter(kill, false); err == nil {
		t.Error("a load that did not list every failure passed")
	}
}
