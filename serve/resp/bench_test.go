package resp

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// BenchmarkRESP: pipelined commands over one loopback connection, 64 per
// round trip, against an in-memory store: BF.MEXISTS and CF.MEXISTS of 10
// items, BF.EXISTS of one item, BF.ADD of one new item and BF.MADD of 10 new
// items into a key reserved for 16 M, and an error reply (CF.ADD on a Bloom key: WRONGTYPE). ns/op is per command.
//
//	go test -run '^$' -bench RESP -count 6 ./serve/resp/
func BenchmarkRESP(b *testing.B) {
	addr, _ := startServer(b, Config{}, serve.Config{})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	bw := bufio.NewWriter(nc)
	// cmd encodes without allocating, so allocs/op are the server's.
	var enc []byte
	cmd := func(args ...string) {
		enc = append(strconv.AppendInt(append(enc[:0], '*'), int64(len(args)), 10), "\r\n"...)
		for _, a := range args {
			enc = append(strconv.AppendInt(append(enc, '$'), int64(len(a)), 10), "\r\n"...)
			enc = append(append(enc, a...), "\r\n"...)
		}
		bw.Write(enc)
	}
	// reply reads one reply (simple, error, integer, or an array of them)
	// and reports whether it was an error.
	var reply func() bool
	reply = func() bool {
		line, err := br.ReadSlice('\n') // no string: allocs/op are the server's
		if err != nil {
			b.Fatal(err)
		}
		switch line[0] {
		case '-':
			return true
		case '*':
			n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
			for range n {
				reply()
			}
		}
		return false
	}
	const depth = 64
	run := func(b *testing.B, wantErr bool, next func(i int)) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%depth == 0 {
				if i > 0 {
					bw.Flush()
					for range depth {
						if reply() != wantErr {
							b.Fatal("unexpected reply kind")
						}
					}
				}
			}
			next(i)
			i++
		}
		bw.Flush()
		for range i % depth {
			reply()
		}
		if i%depth == 0 {
			for range depth {
				reply()
			}
		}
	}
	cmd("BF.RESERVE", "bf", "0.01", "16777216")
	cmd("CF.RESERVE", "cf", "1048576")
	bw.Flush()
	reply()
	reply()
	items := make([]string, 10)
	for i := range items {
		items[i] = fmt.Sprintf("user%d@example.com", i)
	}
	bfMExists := append([]string{"BF.MEXISTS", "bf"}, items...)
	cfMExists := append([]string{"CF.MEXISTS", "cf"}, items...)
	b.Run("bf.mexists", func(b *testing.B) {
		run(b, false, func(int) { cmd(bfMExists...) })
	})
	b.Run("cf.mexists", func(b *testing.B) {
		run(b, false, func(int) { cmd(cfMExists...) })
	})
	b.Run("bf.exists", func(b *testing.B) {
		run(b, false, func(i int) { cmd("BF.EXISTS", "bf", items[i%len(items)]) })
	})
	id := 0
	b.Run("bf.add", func(b *testing.B) {
		run(b, false, func(int) {
			cmd("BF.ADD", "bf", strconv.Itoa(id))
			id++
		})
	})
	b.Run("bf.madd", func(b *testing.B) {
		run(b, false, func(int) {
			args := []string{"BF.MADD", "bf"}
			for range 10 {
				args = append(args, "new"+strconv.Itoa(id))
				id++
			}
			cmd(args...)
		})
	})
	b.Run("error", func(b *testing.B) {
		run(b, true, func(int) { cmd("CF.ADD", "bf", "x") })
	})
}
