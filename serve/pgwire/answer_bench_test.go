package pgwire

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// BenchmarkAnswerLocal sends absent-key lookups that the front end in this
// process answers itself: simple-protocol queries with a literal key (as
// psycopg2 sends them) and pgx's extended-protocol batch, from 8 clients.
// Clients read the replies into their own buffers, so allocs/op are the
// front end's (profile with -memprofile); cpu-µs/op is this process's CPU
// (the front end and the clients) per lookup.
//
//	go test -run XXX -bench AnswerLocal -benchmem ./serve/pgwire
func BenchmarkAnswerLocal(b *testing.B) {
	f := newFrontEnd(b)
	ctx := context.Background()
	q := "SELECT email, n FROM public." + f.table + " WHERE email = "
	for _, proto := range []string{"simple", "extended"} {
		b.Run(proto, func(b *testing.B) {
			const clients = 8
			conns := make([]*pgconn.HijackedConn, clients)
			for i := range conns {
				pc, err := pgconn.Connect(ctx, f.front)
				if err != nil {
					b.Fatal(err)
				}
				// One forwarded lookup learns the result shape.
				if _, err := pc.Exec(ctx, q+"'learn'").ReadAll(); err != nil {
					b.Fatal(err)
				}
				if _, err := pc.Prepare(ctx, "", q+"$1", nil); err != nil {
					b.Fatal(err)
				}
				pc.ExecParams(ctx, q+"$1", [][]byte{[]byte("learn")}, nil, nil, nil).Read()
				hc, err := pc.Hijack()
				if err != nil {
					b.Fatal(err)
				}
				defer hc.Conn.Close()
				conns[i] = hc
			}
			before := f.count(b, "bloomgate_pgwire_answered_total")
			next := make(chan *pgconn.HijackedConn, clients)
			for _, c := range conns {
				next <- c
			}
			b.SetParallelism(clients / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				c := <-next
				var msg []byte
				if proto == "simple" {
					msg, _ = (&pgproto3.Query{String: q + "'absent@example.com'"}).Encode(nil)
				} else {
					msg, _ = (&pgproto3.Parse{Query: q + "$1"}).Encode(nil)
					msg, _ = (&pgproto3.Bind{Parameters: [][]byte{[]byte("absent@example.com")}}).Encode(msg)
					msg, _ = (&pgproto3.Describe{ObjectType: 'P'}).Encode(msg)
					msg, _ = (&pgproto3.Execute{}).Encode(msg)
					msg, _ = (&pgproto3.Sync{}).Encode(msg)
				}
				br := bufio.NewReader(c.Conn)
				hdr := make([]byte, 5)
				body := make([]byte, 4096)
				for pb.Next() {
					if _, err := c.Conn.Write(msg); err != nil {
						b.Error(err)
						return
					}
					for {
						if _, err := io.ReadFull(br, hdr); err != nil {
							b.Error(err)
							return
						}
						n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
						if n > len(body) {
							b.Errorf("message %c of %d bytes", hdr[0], n)
							return
						}
						if _, err := io.ReadFull(br, body[:n]); err != nil {
							b.Error(err)
							return
						}
						if hdr[0] == 'D' || hdr[0] == 'E' {
							b.Errorf("message %c: not answered \"no row\"", hdr[0])
							return
						}
						if hdr[0] == 'Z' {
							break
						}
					}
				}
			})
			b.StopTimer()
			// This process's CPU per lookup: the front end's and its
			// clients', the same work in every run.
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			if got := f.count(b, "bloomgate_pgwire_answered_total") - before; got < float64(b.N) {
				b.Fatalf("answered %v of %d lookups locally", got, b.N)
			}
		})
	}
}
