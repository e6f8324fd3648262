package resp

import (
	"bufio"
	"bytes"
	"strconv"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// connHarness answers one command at a time on a connection with no
// socket: the server's own work (reading the command, the store, the
// reply), with nothing pipelined to spread an allocation over.
type connHarness struct {
	c   *conn
	in  bytes.Reader
	out bytes.Buffer
	enc []byte
}

func newConnHarness(tb testing.TB) *connHarness {
	st, err := serve.Open(serve.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.Reserve("bf", serve.BloomParams{Capacity: 1 << 24, ErrorRate: 0.01}); err != nil {
		tb.Fatal(err)
	}
	h := &connHarness{c: &conn{s: srv, authed: true}}
	h.c.r = reader{br: bufio.NewReader(&h.in), maxInline: srv.cfg.MaxInlineLen}
	h.c.w = writer{bw: bufio.NewWriter(&h.out), proto: 2}
	h.c.setLimits()
	return h
}

// do answers the command cmd key item and returns the reply.
func (h *connHarness) do(tb testing.TB, cmd, key, item []byte) []byte {
	h.enc = append(h.enc[:0], "*3\r\n"...)
	for _, a := range [...][]byte{cmd, key, item} {
		h.enc = append(strconv.AppendInt(append(h.enc, '$'), int64(len(a)), 10), "\r\n"...)
		h.enc = append(append(h.enc, a...), "\r\n"...)
	}
	h.in.Reset(h.enc)
	h.c.r.br.Reset(&h.in)
	h.out.Reset()
	args, err := h.c.r.next()
	if err != nil {
		tb.Fatal(err)
	}
	h.c.dispatch(args)
	h.c.w.bw.Flush()
	return h.out.Bytes()
}

var (
	bfExists, bfAdd, bfKey = []byte("BF.EXISTS"), []byte("BF.ADD"), []byte("bf")
	heldItem, absentItem   = []byte("held@example.com"), []byte("absent@example.com")
)

// TestCommandAllocs: BF.EXISTS and BF.ADD on an existing Bloom key, one
// command at a time, allocate nothing on the server.
func TestCommandAllocs(t *testing.T) {
	h := newConnHarness(t)
	for _, c := range []struct {
		cmd, item []byte
		want      string
	}{
		{bfAdd, heldItem, ":1\r\n"},
		{bfExists, heldItem, ":1\r\n"},
		{bfExists, absentItem, ":0\r\n"},
		{bfAdd, heldItem, ":0\r\n"},
	} {
		if r := h.do(t, c.cmd, bfKey, c.item); string(r) != c.want {
			t.Fatalf("%s %s = %q, want %q", c.cmd, c.item, r, c.want)
		}
	}
	if raceEnabled {
		return // the answers are checked above; the counts rely on pools (raceEnabled)
	}
	item := make([]byte, 0, 32)
	id := 0
	for _, tc := range []struct {
		name string
		run  func()
	}{
		{"BF.EXISTS held", func() { h.do(t, bfExists, bfKey, heldItem) }},
		{"BF.EXISTS absent", func() { h.do(t, bfExists, bfKey, absentItem) }},
		{"BF.ADD held", func() { h.do(t, bfAdd, bfKey, heldItem) }},
		{"BF.ADD new", func() {
			item = strconv.AppendInt(append(item[:0], "new"...), int64(id), 10)
			id++
			if r := h.do(t, bfAdd, bfKey, item); string(r) != ":1\r\n" {
				t.Fatalf("BF.ADD %s = %q", item, r)
			}
		}},
	} {
		if n := testing.AllocsPerRun(200, tc.run); n > 0 {
			t.Errorf("%s: %v allocations on the server, want 0", tc.name, n)
		}
	}
}

// BenchmarkExistsAdd: BF.EXISTS and BF.ADD answered one command at a time
// on a connection with no socket (connHarness): the server's work per
// command, and its allocations, without the client's.
//
//	go test -run '^$' -bench ExistsAdd -benchmem ./serve/resp/
func BenchmarkExistsAdd(b *testing.B) {
	h := newConnHarness(b)
	h.do(b, bfAdd, bfKey, heldItem)
	b.Run("bf.exists", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.do(b, bfExists, bfKey, heldItem)
		}
	})
	b.Run("bf.add-held", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.do(b, bfAdd, bfKey, heldItem)
		}
	})
	b.Run("bf.add-new", func(b *testing.B) {
		b.ReportAllocs()
		item := make([]byte, 0, 32)
		id := 0
		for b.Loop() {
			item = strconv.AppendInt(append(item[:0], "new"...), int64(id), 10)
			id++
			h.do(b, bfAdd, bfKey, item)
		}
	})
}
