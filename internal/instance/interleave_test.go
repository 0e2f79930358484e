package instance

import (
	"slices"
	"strings"
	"testing"
)

// Two instances leaving at once each delete their table before looking at the others', so however their
// steps interleave, the one that looks last sees nobody and removes the interface, and no address a table
// still holds is taken off it. This test enumerates every interleaving of the two leaving sequences, one
// kernel request (a fakeReg or fakeLinks call) being one step, and checks both after every step.
//
// The enumeration re-runs the scenario once per interleaving (the fakes are deterministic): a schedule is the
// list of which instance goes at each point where both wait at a request; the next schedule is the previous
// one with its last choice that had an untried alternative advanced, and everything after it left to the
// first option.
func TestBothLeavingAtOnceEveryInterleaving(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []string
	}{
		{"same addresses", []string{"169.254.20.10", "10.96.0.10"}, []string{"169.254.20.10", "10.96.0.10"}},
		{"each has one the other lacks", []string{"169.254.20.10", "169.254.20.11"}, []string{"169.254.20.10", "fd00::a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var schedule []int
			runs := 0
			for {
				choices, options, trace := leaveInterleaved(t, schedule, tc.a, tc.b)
				runs++
				if t.Failed() {
					t.Fatalf("interleaving %d failed; steps in order: %s", runs, strings.Join(trace, ", "))
				}
				p := len(choices) - 1
				for p >= 0 && choices[p]+1 >= options[p] {
					p--
				}
				if p < 0 {
					break
				}
				schedule = append(slices.Clone(choices[:p]), choices[p]+1)
			}
			// Each leaving sequence makes at least four requests (delete our table, delete legacy tables,
			// list, remove or ensure), so there are at least C(8,4) = 70 interleavings.
			if runs < 70 {
				t.Fatalf("only %d interleavings enumerated", runs)
			}
			t.Logf("%d interleavings", runs)
		})
	}
}

// leaveInterleaved starts two serving instances, then runs both leaving sequences concurrently, letting one
// kernel request through at a time: at the i-th point where a choice exists, schedule[i] picks (0: the first
// waiting instance, in order a, b), and past the end of schedule the first one goes. It returns the choice
// made and the number of options at each point, and the steps in the order they ran.
func leaveInterleaved(t *testing.T, schedule []int, ipsA, ipsB []string) (choices, options []int, trace []string) {
	t.Helper()
	k := newFakeKernel()
	a, regA := newInstance(t, k, ipsA...)
	start(t, a)
	b, regB := newInstance(t, k, ipsB...)
	start(t, b)

	type event struct {
		id      int
		request string
		done    bool
		err     error
	}
	arrive := make(chan event)
	var proceed [2]chan struct{}
	for i, pair := range []struct {
		reg *fakeReg
		n   *Node
	}{{regA, a}, {regB, b}} {
		proceed[i] = make(chan struct{})
		step := func(request string) { arrive <- event{id: i, request: request}; <-proceed[i] }
		pair.reg.step = step
		pair.n.links.(*fakeLinks).step = step
	}
	for i, n := range []*Node{a, b} {
		go func() {
			_, err := n.Leave(false, 0)
			arrive <- event{id: i, done: true, err: err}
		}()
	}

	names := [2]string{"a", "b"}
	waiting := map[int]string{} // the request each waiting instance makes next
	done := 0
	for {
		// Wait until nothing runs: every instance waits at its next request or has finished.
		for len(waiting)+done < 2 {
			e := <-arrive
			switch {
			case e.done:
				done++
				trace = append(trace, names[e.id]+" done")
				if e.err != nil {
					t.Errorf("instance %s: leave: %v", names[e.id], e.err)
				}
			default:
				waiting[e.id] = e.request
			}
		}
		checkNothingNeededIsRemoved(t, k)
		if done == 2 {
			break
		}
		ids := slices.Sorted(func(yield func(int) bool) {
			for id := range waiting {
				if !yield(id) {
					return
				}
			}
		})
		c := 0
		if len(ids) > 1 {
			if p := len(choices); p < len(schedule) {
				c = schedule[p]
			}
			choices, options = append(choices, c), append(options, len(ids))
		}
		id := ids[c]
		trace = append(trace, names[id]+" "+waiting[id])
		delete(waiting, id)
		proceed[id] <- struct{}{}
	}
	if k.link || len(k.tables) != 0 {
		t.Errorf("after both left: link %v with %v, %d tables; want neither", k.link, k.addrs, len(k.tables))
	}
	// The last request that touched the interface removed it: nothing made it again after the last one out.
	for _, step := range slices.Backward(trace) {
		if _, req, _ := strings.Cut(step, " "); strings.HasSuffix(req, "link") || strings.HasPrefix(req, "ensure link") {
			if req != "remove link" {
				t.Errorf("the last request on the interface was %q, want its removal", step)
			}
			break
		}
	}
	return choices, options, trace
}

// checkNothingNeededIsRemoved: every address a live table holds is on the interface.
func checkNothingNeededIsRemoved(t *testing.T, k *fakeKernel) {
	t.Helper()
	for name, tb := range k.tables {
		for _, ip := range tb.ips {
			if !k.link || !slices.Contains(k.addrs, ip) {
				t.Errorf("table %s needs %s, but the interface (present: %v) carries %v", name, ip, k.link, k.addrs)
			}
		}
	}
}
