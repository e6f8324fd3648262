package pgwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

func frameSeeds() [][]byte {
	q, _ := (&pgproto3.Query{String: "SELECT 1"}).Encode(nil)
	b, _ := (&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("k")}}).Encode(nil)
	st, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}}).Encode(nil)
	ssl, _ := (&pgproto3.SSLRequest{}).Encode(nil)
	return [][]byte{
		append(q, b...),
		append(append(ssl, st...), q...),
		{'Q', 0, 0, 0, 3},
		{'Q', 0xff, 0xff, 0xff, 0xff},
		{'Q', 0, 0, 0x10, 0},
		append([]byte{'d', 0, 1, 0, 4}, make([]byte, 70000)...),
		{0, 0, 0, 8},
	}
}

// FuzzMsgReader: every message read is whole (its length field matches),
// the bytes read are the input's, in order, and nothing panics.
func FuzzMsgReader(f *testing.F) {
	for _, s := range frameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := msgReader{br: bufio.NewReaderSize(bytes.NewReader(in), 16), max: 1 << 16}
		var got []byte
		for {
			m, err := r.next()
			if err != nil {
				var tooBig *pgproto3.ExceededMaxBodyLenErr
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errBadLength) && !errors.As(err, &tooBig) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			if n := int(binary.BigEndian.Uint32(m[1:])); n+1 != len(m) {
				t.Fatalf("message of %d bytes with length %d", len(m), n)
			}
			got = append(got, m...)
		}
		if !bytes.HasPrefix(in, got) {
			t.Fatal("the messages read are not the input's")
		}
	})
}

// FuzzStartup: pgproto3 reading startup packets through boundedReader
// never takes a byte past the packet it returns, and nothing panics.
func FuzzStartup(f *testing.F) {
	for _, s := range frameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		src := bytes.NewReader(in)
		br := bufio.NewReaderSize(src, 16)
		be := pgproto3.NewBackend(&boundedReader{br: br}, io.Discard)
		at := 0 // where the next packet starts
		for range 3 {
			if _, err := be.ReceiveStartupMessage(); err != nil {
				return
			}
			consumed := len(in) - src.Len() - br.Buffered()
			if want := at + int(binary.BigEndian.Uint32(in[at:])); consumed != want {
				t.Fatalf("read up to byte %d, the packet ends at %d", consumed, want)
			}
			at = consumed
		}
	})
}

// TestLargeMessages: messages larger than the read buffers, both ways
// (a long query, a long value in a row, COPY data), relayed whole.
func TestLargeMessages(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, f.front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, n := range []int{readBufferSize - 10, readBufferSize + 1, 3 << 20} {
		long := strings.Repeat("x", n)
		var got string
		if err := c.QueryRow(ctx, "SELECT $1::text || 'y'", long).Scan(&got); err != nil || got != long+"y" {
			t.Fatalf("a %d-byte value: %d bytes back, %v", n, len(got), err)
		}
		var length int
		if err := c.QueryRow(ctx, "SELECT length('"+long+"')", pgx.QueryExecModeSimpleProtocol).Scan(&length); err != nil || length != n {
			t.Fatalf("a %d-byte query: %d, %v", n, length, err)
		}
	}
	if _, err := c.Exec(ctx, "CREATE TEMP TABLE big (v text)"); err != nil {
		t.Fatal(err)
	}
	rows := [][]any{{strings.Repeat("a", 100_000)}, {strings.Repeat("b", 2<<20)}, {"c"}}
	if n, err := c.CopyFrom(ctx, pgx.Identifier{"big"}, []string{"v"}, pgx.CopyFromRows(rows)); err != nil || n != 3 {
		t.Fatalf("COPY FROM: %d %v", n, err)
	}
	var total int
	if err := c.QueryRow(ctx, "SELECT sum(length(v)) FROM big").Scan(&total); err != nil || total != 100_000+2<<20+1 {
		t.Fatalf("COPY FROM stored %d bytes, %v", total, err)
	}
}

// TestDeclaredLengthNotAllocated: a message's declared length is not
// allocated before its bytes come: a peer that sends only a header
// declaring 60 MB holds at most a chunk of memory.
func TestDeclaredLengthNotAllocated(t *testing.T) {
	in := []byte{'Q', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(in[1:], 60<<20)
	in = append(in, "SELECT 1"...)
	r := msgReader{br: bufio.NewReaderSize(bytes.NewReader(in), 1024), max: 64 << 20}
	if _, err := r.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("next: %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(r.buf) > 2*frameChunk {
		t.Errorf("held %d bytes for 13 received", cap(r.buf))
	}
}
