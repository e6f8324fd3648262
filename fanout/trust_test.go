package fanout

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestBatchMAC(t *testing.T) {
	b := Batch{Term: 7, Prev: 10, Txns: []changefeed.Txn{{Commit: 11, End: 12, Changes: []changefeed.Change{{Kind: changefeed.Delete, Key: []byte("k")}}}}}
	signed, err := AppendBatch(nil, b, testKey)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := AppendBatch(nil, b, nil)
	if got, err := DecodeBatch(signed, testKey); err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("signed batch with its key: %+v, %v", got, err)
	}
	if _, err := DecodeBatch(plain, testKey); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("unsigned batch with a key: %v, want ErrUnauthenticated", err)
	}
	if _, err := DecodeBatch(signed, []byte("another key, 16+ bytes")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("batch signed with another key: %v, want ErrUnauthenticated", err)
	}
	if got, err := DecodeBatch(signed, nil); err != nil || !reflect.DeepEqual(got, b) {
		t.Errorf("signed batch without a key (not checked): %+v, %v", got, err)
	}
	// A signed batch cannot pass for a heartbeat or a record, nor the
	// reverse: each kind has its own MAC domain.
	hb := appendHeartbeat(nil, beatValue{Term: 7, Head: 99, Beat: 1}, testKey)
	if _, err := DecodeBatch(hb, testKey); err == nil {
		t.Errorf("a heartbeat decoded as a batch")
	}
	if _, err := decodeHeartbeat(signed, testKey); err == nil {
		t.Errorf("a batch decoded as a heartbeat")
	}
}

func TestHeartbeatAndRecordRoundTrip(t *testing.T) {
	for _, key := range [][]byte{nil, testKey} {
		for _, h := range []beatValue{
			{Term: 3, Head: 0x16B374D848, Beat: 42, Poll: 9, Polled: 0x16B374D800, Gap: 1500 * time.Millisecond},
			{Term: 3, Head: 0x16B374D848, Beat: 42, Poll: 1, Polled: 0x16B374D800, Gap: -1},
			{Term: 3, Head: 0x16B374D848, Beat: 42, Gap: -1},
		} {
			got, err := decodeHeartbeat(appendHeartbeat(nil, h, key), key)
			if err != nil || got != h {
				t.Fatalf("heartbeat (key %v): %+v, %v", key != nil, got, err)
			}
		}
		r := record{Term: 3, Position: 0x16B374D848, Size: 1 << 20, Gen: 5, Cursor: "1234", Object: "00000016b374d848-0000000000000003"}
		r.Digest[0], r.Digest[31] = 1, 2
		enc := appendRecord(nil, r, key)
		gotR, err := decodeRecord(enc, key)
		if err != nil || gotR != r {
			t.Fatalf("record (key %v): %+v, %v", key != nil, gotR, err)
		}
		for n := range enc {
			bad := bytes.Clone(enc)
			bad[n] ^= 0x20
			if _, err := decodeRecord(bad, key); err == nil {
				t.Fatalf("record with byte %d flipped decoded", n)
			}
		}
	}
	if _, err := decodeRecord(appendRecord(nil, record{Object: "x"}, nil), testKey); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("unsigned record with a key: %v, want ErrUnauthenticated", err)
	}
}

func TestRecordNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b record
		want bool
	}{
		{record{Term: 2, Position: 1}, record{Term: 1, Position: 9}, true},
		{record{Term: 1, Position: 9}, record{Term: 2, Position: 1}, false},
		{record{Term: 1, Position: 9}, record{Term: 1, Position: 8}, true},
		{record{Term: 1, Position: 8}, record{Term: 1, Position: 8}, false},
	} {
		if got := tc.a.newer(tc.b); got != tc.want {
			t.Errorf("%+v newer than %+v = %v", tc.a, tc.b, got)
		}
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(appendHeartbeat(nil, beatValue{Term: 1, Head: 2, Beat: 3, Gap: -1}, nil), false)
	f.Add(appendHeartbeat(nil, beatValue{Term: 1, Head: 2, Beat: 3, Gap: -1}, testKey), true)
	f.Add(appendHeartbeat(nil, beatValue{Term: 1, Head: 2, Beat: 3, Poll: 4, Polled: 2, Gap: 5}, nil), false)
	f.Fuzz(func(t *testing.T, p []byte, keyed bool) {
		var key []byte
		if keyed {
			key = testKey
		}
		h, err := decodeHeartbeat(p, key)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrUnauthenticated", err)
			}
			return
		}
		if again, err := decodeHeartbeat(appendHeartbeat(nil, h, key), key); err != nil || again != h {
			t.Fatalf("re-encoding changed the heartbeat: %v", err)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, record{Term: 1, Position: 2, Cursor: "3", Object: "o"}, nil), false)
	f.Add(appendRecord(nil, record{Term: 1, Position: 2, Cursor: "3", Object: "o"}, testKey), true)
	f.Fuzz(func(t *testing.T, p []byte, keyed bool) {
		var key []byte
		if keyed {
			key = testKey
		}
		r, err := decodeRecord(p, key)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrUnauthenticated", err)
			}
			return
		}
		if again, err := decodeRecord(appendRecord(nil, r, key), key); err != nil || again != r {
			t.Fatalf("re-encoding changed the record: %v", err)
		}
	})
}
