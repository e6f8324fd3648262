package fanout_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
)

var batches = []fanout.Batch{
	{Prev: 1, Txns: []changefeed.Txn{{Commit: 2, End: 2}}},
	{Prev: 0x16B374D848, Txns: []changefeed.Txn{
		{Commit: 0x16B374D900, End: 0x16B374D930, Time: time.Unix(1700000000, 123).UTC(), Changes: []changefeed.Change{
			{Kind: changefeed.Insert, Key: []byte("a@example.com")},
			{Kind: changefeed.Delete, Key: []byte("b@example.com")},
			{Kind: changefeed.UnknownDelete},
			{Kind: changefeed.Insert, Key: []byte{}},
		}},
		{Commit: 0x16B374DA00, End: 0x16B374DA00},
		{Commit: 0x16B374DB00, End: 0x16B374DB30, Changes: []changefeed.Change{{Kind: changefeed.Truncate}}},
	}},
}

func TestBatchRoundTrip(t *testing.T) {
	for i, b := range batches {
		enc, err := fanout.AppendBatch(nil, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fanout.DecodeBatch(enc, nil)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("batch %d: got %+v, want %+v", i, got, b)
		}
		for n := range enc {
			if _, err := fanout.DecodeBatch(enc[:n], nil); !errors.Is(err, fanout.ErrCorrupt) {
				t.Fatalf("batch %d cut to %d bytes: err %v", i, n, err)
			}
		}
		for n := range enc {
			bad := append([]byte(nil), enc...)
			bad[n] ^= 0x40
			if _, err := fanout.DecodeBatch(bad, nil); !errors.Is(err, fanout.ErrCorrupt) {
				t.Fatalf("batch %d with byte %d flipped: err %v", i, n, err)
			}
		}
	}
}

func TestAppendBatchRefuses(t *testing.T) {
	for name, b := range map[string]fanout.Batch{
		"empty":        {Prev: 1},
		"not after":    {Prev: 5, Txns: []changefeed.Txn{{Commit: 5, End: 5}}},
		"decreasing":   {Prev: 1, Txns: []changefeed.Txn{{Commit: 3, End: 3}, {Commit: 2, End: 2}}},
		"commit > end": {Prev: 1, Txns: []changefeed.Txn{{Commit: 4, End: 3}}},
		"bad kind":     {Prev: 1, Txns: []changefeed.Txn{{Commit: 2, End: 2, Changes: []changefeed.Change{{Kind: 9}}}}},
		"value":        {Prev: 1, Txns: []changefeed.Txn{{Commit: 2, End: 2, Changes: []changefeed.Change{{Kind: changefeed.Insert, Key: []byte("k"), Value: []byte("v")}}}}},
	} {
		if out, err := fanout.AppendBatch([]byte("x"), b, nil); err == nil || string(out) != "x" {
			t.Errorf("%s: AppendBatch = %q, %v; want an error and dst unchanged", name, out, err)
		}
	}
}

func TestContinue(t *testing.T) {
	b := fanout.Batch{Prev: 10, Txns: []changefeed.Txn{{Commit: 11, End: 12}, {Commit: 13, End: 14}, {Commit: 15, End: 16}}}
	for _, tc := range []struct {
		pos  changefeed.Position
		want int // transactions returned; -1: ErrGap
	}{
		{10, 3}, {12, 2}, {14, 1}, {16, 0}, {20, 0}, {9, -1}, {11, -1}, {13, -1},
	} {
		txns, err := fanout.Continue(tc.pos, b)
		switch {
		case tc.want < 0:
			if !errors.Is(err, fanout.ErrGap) || !errors.Is(err, changefeed.ErrRebuild) {
				t.Errorf("pos %d: err %v, want ErrGap wrapping ErrRebuild", tc.pos, err)
			}
		case err != nil || len(txns) != tc.want:
			t.Errorf("pos %d: %d txns, %v; want %d", tc.pos, len(txns), err, tc.want)
		case tc.want > 0 && txns[0].End <= tc.pos:
			t.Errorf("pos %d: first txn ends at %d", tc.pos, txns[0].End)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, b := range batches {
		enc, _ := fanout.AppendBatch(nil, b, nil)
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := fanout.DecodeBatch(p, nil)
		if err != nil {
			if !errors.Is(err, fanout.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc, err := fanout.AppendBatch(nil, b, nil)
		if err != nil {
			t.Fatalf("decoded batch does not encode: %v", err)
		}
		again, err := fanout.DecodeBatch(enc, nil)
		if err != nil || !reflect.DeepEqual(again, b) {
			t.Fatalf("re-encoding changed the batch: %v", err)
		}
	})
}
