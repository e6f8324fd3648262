package memlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/memlog"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
)

func TestConformance(t *testing.T) {
	fanouttest.Conformance(t, func(t *testing.T) fanout.Backend {
		return memlog.New(memlog.Config{LeaseTTL: 200 * time.Millisecond}).Backend()
	})
}

// TestDeletedEntryIsGap: an entry lost between two is a gap for Read.
func TestDeletedEntryIsGap(t *testing.T) {
	ctx := context.Background()
	s := memlog.New(memlog.Config{})
	l := s.Backend().Log
	var after fanout.Cursor
	var curs []fanout.Cursor
	for _, d := range []string{"a", "b", "c"} {
		c, err := l.Append(ctx, after, []byte(d))
		if err != nil {
			t.Fatal(err)
		}
		curs, after = append(curs, c), c
	}
	if err := s.Delete(curs[1]); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := l.Read(ctx, "", func(e fanout.Entry) error { got = append(got, string(e.Data)); return nil })
	if !errors.Is(err, fanout.ErrGap) || len(got) != 1 {
		t.Fatalf("Read across a deleted entry: %q, %v; want [a] and ErrGap", got, err)
	}
	// A lost tail: Last names the last entry left and appends go after
	// the newest sequence.
	if err := s.Delete(curs[2]); err != nil {
		t.Fatal(err)
	}
	last, tail, err := l.Last(ctx)
	if err != nil || last.Cursor != curs[0] || tail != curs[2] {
		t.Fatalf("Last after the tail was lost: %+v, %q, %v", last, tail, err)
	}
}
