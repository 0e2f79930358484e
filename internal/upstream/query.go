package upstream

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
)

const headerLen = 12

// maxAttempts bounds the sends of one query (the first, its hedges and its retries after a connection died); it
// is also the capacity of the query's result channel, so that no reader ever blocks delivering to it.
const maxAttempts = 8

// result is what a connection delivers for one attempt: an answer (err nil; the query's ans holds it) or the
// connection's death.
type result struct {
	c   *conn
	err error
}

// attempt is one send of a query.
type attempt struct {
	c     *conn
	id    uint16
	ahead int32 // queries in flight on c before this one
	sent  time.Time
}

// query is one question in flight across its attempts. Queries are pooled: a steady stream of misses allocates
// none of this.
type query struct {
	wire     []byte // the packed request; each attempt's ID is written into the connection's copy
	qend     int    // end of the question section in wire
	won      atomic.Bool
	ch       chan result
	ans      []byte // the winning answer, written once by the reader that won
	attempts [maxAttempts]attempt
	n        int
	timer    *time.Timer
}

var queries = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &query{ch: make(chan result, maxAttempts), wire: make([]byte, 0, 512), ans: make([]byte, 0, 512), timer: t}
}}

// putQuery returns q once every attempt has been forgotten by its connection, so no reader can deliver to it.
func putQuery(q *query) {
	for len(q.ch) > 0 {
		<-q.ch
	}
	q.timer.Stop()
	if cap(q.ans) > 64<<10 {
		q.ans = make([]byte, 0, 512)
	}
	queries.Put(q)
}

// questionEnd is the offset just past the first question of a packed message, or 0 if there is none or it does
// not parse. Queries carry their question uncompressed.
func questionEnd(m []byte) int {
	if len(m) < headerLen || binary.BigEndian.Uint16(m[4:]) == 0 {
		return 0
	}
	i := headerLen
	for i < len(m) {
		l := int(m[i])
		if l == 0 {
			i++
			if i+4 > len(m) {
				return 0
			}
			return i + 4
		}
		if l&0xC0 != 0 {
			return 0
		}
		i += 1 + l
	}
	return 0
}

// sameQuestion says an answer carries q's question (names compared without case, as resolvers do after 0x20
// randomisation upstream).
func (q *query) sameQuestion(ans []byte) bool {
	if q.qend == 0 {
		return true
	}
	if len(ans) < q.qend || binary.BigEndian.Uint16(ans[4:]) != 1 {
		return false
	}
	for i := headerLen; i < q.qend; i++ {
		a, b := q.wire[i], ans[i]
		if a != b && lower(a) != lower(b) {
			return false
		}
	}
	return true
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}
