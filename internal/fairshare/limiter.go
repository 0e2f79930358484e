package fairshare

import (
	"context"
	"sync"
	"time"
)

// limiter bounds the queries in flight through one server block's forwards and shares the bound between the
// sources asking. Its rules, with n the sources holding or waiting for a slot and share = limit/n (at least 1):
//
//   - while a slot is free and nobody waits, any query takes it: a lone client may use the whole bound;
//   - when all are taken, a query from a source that holds (or waits for) fewer than share waits for one, at
//     most maxWait; one from a source at or over its share is refused at once (the shed falls on the heavy);
//   - a slot given back goes to the waiting source that holds the fewest, the oldest of its waiters first.
//
// So whoever floods fills the bound only until someone else asks: from then on every slot it gives back goes
// to the others until each holds its share. Waiters are bounded too (at most limit), so the worst case is
// limit queries in flight, as with forward's max_concurrent alone, and at most limit goroutines parked here.
type limiter struct {
	limit   int
	maxWait time.Duration

	mu       sync.Mutex
	inflight int
	waiting  int
	sources  map[string]*source // those holding or waiting for a slot
}

type source struct {
	inflight int
	queue    []chan struct{} // closed when the slot is handed over
}

func newLimiter(limit int, maxWait time.Duration) *limiter {
	return &limiter{limit: limit, maxWait: maxWait, sources: map[string]*source{}}
}

// acquire takes a slot for a query from src, waiting if the rules say so; false means refused. A true must
// be paired with release(src).
func (l *limiter) acquire(ctx context.Context, src string) bool {
	l.mu.Lock()
	s := l.sources[src]
	if s == nil {
		s = &source{}
		l.sources[src] = s
	}
	if l.inflight < l.limit && l.waiting == 0 {
		l.inflight++
		s.inflight++
		l.mu.Unlock()
		return true
	}
	share := max(1, l.limit/len(l.sources))
	if s.inflight+len(s.queue) >= share || l.waiting >= l.limit {
		l.forget(src, s)
		l.mu.Unlock()
		return false
	}
	granted := make(chan struct{})
	s.queue = append(s.queue, granted)
	l.waiting++
	l.mu.Unlock()

	timer := time.NewTimer(l.maxWait)
	defer timer.Stop()
	select {
	case <-granted:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, c := range s.queue {
		if c == granted {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			l.waiting--
			l.forget(src, s)
			return false
		}
	}
	return true // handed over while the timer fired
}

// release gives src's slot back: to the waiting source holding the fewest, or to the pool.
func (l *limiter) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	s.inflight--
	l.forget(src, s)
	if l.waiting == 0 {
		l.inflight--
		return
	}
	var next *source
	for _, w := range l.sources {
		if len(w.queue) > 0 && (next == nil || w.inflight < next.inflight) {
			next = w
		}
	}
	granted := next.queue[0]
	next.queue = next.queue[1:]
	next.inflight++
	l.waiting--
	close(granted)
}

// forget drops a source that neither holds nor waits for a slot; l.mu held.
func (l *limiter) forget(src string, s *source) {
	if s.inflight == 0 && len(s.queue) == 0 {
		delete(l.sources, src)
	}
}

// inFlight is what the limiter holds: queries in flight, queries waiting, sources.
func (l *limiter) inFlight() (inflight, waiting, sources int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight, l.waiting, len(l.sources)
}
