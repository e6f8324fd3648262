package fanouttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/fanout"
)

// Conformance checks the contract of fanout.Log, fanout.Lease and
// fanout.Store (fanout/log.go) on an adapter. newBackend returns the
// backend of a new, empty set each call (its LeaseTTL is waited out once).
// Every transport runs it: fanout/memlog, fanout/jetstream,
// fanout/redisstream.
func Conformance(t *testing.T, newBackend func(t *testing.T) fanout.Backend) {
	t.Run("Log", func(t *testing.T) { conformLog(t, newBackend(t)) })
	t.Run("AsyncAppend", func(t *testing.T) { conformAsync(t, newBackend(t)) })
	t.Run("Lease", func(t *testing.T) { conformLease(t, newBackend(t)) })
	t.Run("Store", func(t *testing.T) { conformStore(t, newBackend(t)) })
}

func conformLog(t *testing.T, b fanout.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := b.Log
	last, tail, err := l.Last(ctx)
	if err != nil || last.Data != nil {
		t.Fatalf("Last of an empty log: %+v, %q, %v", last, tail, err)
	}
	var curs []fanout.Cursor
	after := tail
	for _, d := range []string{"one", "two", "three"} {
		c, err := l.Append(ctx, after, []byte(d))
		if err != nil {
			t.Fatalf("Append %s after %q: %v", d, after, err)
		}
		curs = append(curs, c)
		after = c
	}
	// A retried append of the same data after the same entry is the
	// entry it appended; other data there is fenced.
	if c, err := l.Append(ctx, curs[1], []byte("three")); err != nil || c != curs[2] {
		t.Fatalf("retried Append: %q, %v; want %q", c, err, curs[2])
	}
	if _, err := l.Append(ctx, curs[1], []byte("other")); !errors.Is(err, fanout.ErrFenced) {
		t.Fatalf("Append after a stale entry: %v, want ErrFenced", err)
	}
	if _, err := l.Append(ctx, tail, []byte("other")); !errors.Is(err, fanout.ErrFenced) {
		t.Fatalf("Append after the start of a log with entries: %v, want ErrFenced", err)
	}
	last, tail, err = l.Last(ctx)
	if err != nil || last.Cursor != curs[2] || string(last.Data) != "three" || tail != curs[2] {
		t.Fatalf("Last: %+v, %q, %v; want three at %q", last, tail, err, curs[2])
	}
	// Read delivers in order after the cursor, and waits for new entries.
	rctx, rcancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- l.Read(rctx, curs[0], func(e fanout.Entry) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(e.Data))
			if string(e.Data) == "four" {
				return io.EOF
			}
			return nil
		})
	}()
	time.Sleep(100 * time.Millisecond)
	c4, err := l.Append(ctx, curs[2], []byte("four"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Read returned %v, want fn's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Read did not deliver an entry appended while it waited")
	}
	rcancel()
	mu.Lock()
	if !slices.Equal(got, []string{"two", "three", "four"}) {
		t.Fatalf("Read after the first entry delivered %q", got)
	}
	mu.Unlock()
	// Read ends with ctx.
	rctx, rcancel = context.WithTimeout(ctx, 200*time.Millisecond)
	err = l.Read(rctx, c4, func(fanout.Entry) error { return errors.New("no entry expected") })
	rcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read at the end until ctx's deadline: %v", err)
	}
}

// conformAsync checks a Log that pipelines appends (fanout.AsyncAppender):
// appends in flight together are held in order at the cursors returned;
// one sent after a stale entry fails, and the log is left as it was.
func conformAsync(t *testing.T, b fanout.Backend) {
	a, ok := b.Log.(fanout.AsyncAppender)
	if !ok {
		t.Skip("the Log does not pipeline appends")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, tail, err := b.Log.Last(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data := []string{"a1", "a2", "a3"}
	var curs []fanout.Cursor
	var dones []<-chan error
	after := tail
	for _, d := range data {
		cur, done, err := a.AppendAsync(ctx, after, []byte(d))
		if err != nil {
			t.Fatalf("AppendAsync %s: %v", d, err)
		}
		curs, dones, after = append(curs, cur), append(dones, done), cur
	}
	for i, done := range dones {
		if err := <-done; err != nil {
			t.Fatalf("AppendAsync %s: %v", data[i], err)
		}
	}
	var got []fanout.Entry
	err = b.Log.Read(ctx, tail, func(e fanout.Entry) error {
		got = append(got, e)
		if len(got) == len(data) {
			return io.EOF
		}
		return nil
	})
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Cursor != curs[i] || string(e.Data) != data[i] {
			t.Fatalf("entry %d: %q at %q, want %q at %q", i, e.Data, e.Cursor, data[i], curs[i])
		}
	}
	_, done, err := a.AppendAsync(ctx, curs[1], []byte("stale"))
	if err == nil {
		err = <-done
	}
	if err == nil {
		t.Fatal("AppendAsync after a stale entry succeeded")
	}
	last, _, err := b.Log.Last(ctx)
	if err != nil || last.Cursor != curs[2] || string(last.Data) != "a3" {
		t.Fatalf("Last after refused appends: %q at %q, %v; want a3 at %q", last.Data, last.Cursor, err, curs[2])
	}
}

func conformLease(t *testing.T, b fanout.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, other := b.NewLease(), b.NewLease()
	t1, err := a.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, "b"); !errors.Is(err, fanout.ErrHeld) {
		t.Fatalf("Acquire of a held lease: %v, want ErrHeld", err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("Renew by the holder: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t2, err := other.Acquire(ctx, "b")
	if err != nil || t2 <= t1 {
		t.Fatalf("Acquire after Release: term %d, %v; want a term above %d", t2, err, t1)
	}
	if err := a.Renew(ctx); !errors.Is(err, fanout.ErrLost) {
		t.Fatalf("Renew of a lease taken over: %v, want ErrLost", err)
	}
	// Unrenewed, the lease expires and another takes it with a newer term.
	time.Sleep(b.LeaseTTL + b.LeaseTTL/2)
	third := b.NewLease()
	t3, err := third.Acquire(ctx, "c")
	if err != nil || t3 <= t2 {
		t.Fatalf("Acquire after the TTL: term %d, %v; want a term above %d", t3, err, t2)
	}
	if err := other.Renew(ctx); !errors.Is(err, fanout.ErrLost) {
		t.Fatalf("Renew of an expired lease: %v, want ErrLost", err)
	}
}

func conformStore(t *testing.T, b fanout.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := b.Store
	if _, _, err := s.Get(ctx, "head"); !errors.Is(err, fanout.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, "head", []byte("h1")); err != nil {
		t.Fatal(err)
	}
	// Get shows every completed Put (the heartbeat's freshness bound
	// relies on it), at once.
	for i := range 50 {
		want := fmt.Sprint("h", i)
		if err := s.Put(ctx, "head", []byte(want)); err != nil {
			t.Fatal(err)
		}
		if v, _, err := s.Get(ctx, "head"); err != nil || string(v) != want {
			t.Fatalf("Get right after Put %d: %q, %v", i, v, err)
		}
	}
	r1, err := s.CompareAndPut(ctx, "snapshot", []byte("s1"), 0)
	if err != nil {
		t.Fatalf("CompareAndPut creating: %v", err)
	}
	if _, err := s.CompareAndPut(ctx, "snapshot", []byte("x"), 0); !errors.Is(err, fanout.ErrConflict) {
		t.Fatalf("CompareAndPut creating an existing key: %v, want ErrConflict", err)
	}
	r2, err := s.CompareAndPut(ctx, "snapshot", []byte("s2"), r1)
	if err != nil {
		t.Fatalf("CompareAndPut at its revision: %v", err)
	}
	if _, err := s.CompareAndPut(ctx, "snapshot", []byte("x"), r1); !errors.Is(err, fanout.ErrConflict) {
		t.Fatalf("CompareAndPut at an old revision: %v, want ErrConflict", err)
	}
	if v, rev, err := s.Get(ctx, "snapshot"); err != nil || string(v) != "s2" || rev != r2 {
		t.Fatalf("Get after CompareAndPut: %q rev %d, %v; want s2 rev %d", v, rev, err, r2)
	}
	// Objects, larger than one chunk of any adapter.
	big := bytes.Repeat([]byte("0123456789abcdef"), 300_000)
	if err := s.PutObject(ctx, "obj-1", bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	// A replica may serve reads a moment behind the write (JetStream's
	// direct gets): an object appears within seconds.
	var rc io.ReadCloser
	var size int64
	for deadline := time.Now().Add(10 * time.Second); ; {
		rc, size, err = s.GetObject(ctx, "obj-1")
		if err == nil || !errors.Is(err, fanout.ErrNotFound) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, big) || (size != 0 && size != int64(len(big))) {
		t.Fatalf("GetObject: %d bytes (size %d), %v; want the %d put", len(got), size, err, len(big))
	}
	if names, err := s.Objects(ctx); err != nil || !slices.Contains(names, "obj-1") {
		t.Fatalf("Objects: %q, %v", names, err)
	}
	if err := s.DeleteObject(ctx, "obj-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetObject(ctx, "obj-1"); !errors.Is(err, fanout.ErrNotFound) {
		t.Fatalf("GetObject after DeleteObject: %v, want ErrNotFound", err)
	}
}
