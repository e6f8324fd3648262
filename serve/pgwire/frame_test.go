package pgwire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

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
