package upstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// BenchmarkExchange is the miss path's transport: concurrent queries over TCP (force_tcp) and UDP to a
// loopback server. The server runs in the same process: read the profile (-cpuprofile) and the allocations
// for this package's share, not the total.
func BenchmarkExchange(b *testing.B) {
	var seen atomic.Int64
	addr, _ := testenv.ServeDNS(b, "127.0.0.1:0", answerer(0, &seen))
	for _, tcp := range []bool{true, false} {
		b.Run(fmt.Sprintf("tcp=%v", tcp), func(b *testing.B) {
			u := New(addr, Options{})
			defer u.Stop()
			var n atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := new(dns.Msg)
				for pb.Next() {
					req.SetQuestion(fmt.Sprintf("b%d.example.", n.Add(1)), dns.TypeA)
					if _, err := u.Exchange(context.Background(), req, tcp, time.Now().Add(5*time.Second)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/float64(u.m.Writes.Load()), "queries/write")
		})
	}
}
