package fanout

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// headStore holds just the values Instance.HeadAge reads: the heartbeat
// (and no snapshot record).
type headStore struct {
	mu sync.Mutex
	v  map[string][]byte
}

func (s *headStore) Get(_ context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.v[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return v, 1, nil
}

func (s *headStore) Put(_ context.Context, key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v[key] = val
	return nil
}

func (s *headStore) CompareAndPut(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errors.New("not here")
}
func (s *headStore) PutObject(context.Context, string, io.Reader) error {
	return errors.New("not here")
}
func (s *headStore) GetObject(context.Context, string) (io.ReadCloser, int64, error) {
	return nil, 0, ErrNotFound
}
func (s *headStore) Objects(context.Context) ([]string, error)  { return nil, nil }
func (s *headStore) DeleteObject(context.Context, string) error { return nil }

// TestInstanceHeadFreshness: an instance takes a database head from the
// feeder's heartbeat only when it is a newer read of the database than one
// it saw before (so its time is bounded), never from a heartbeat without a
// polled head (an old feeder's, or a new term's before its first read),
// nor from a replayed one.
func TestInstanceHeadFreshness(t *testing.T) {
	ctx := context.Background()
	st := &headStore{v: map[string][]byte{}}
	in, err := NewInstance(Backend{Name: "t", Log: nil, Store: st}, InstanceConfig{})
	if err == nil {
		t.Fatal("NewInstance without a Log succeeded")
	}
	in, err = NewInstance(Backend{Name: "t", Log: nopLog{}, Store: st}, InstanceConfig{HeadTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	beat := uint64(0)
	put := func(h beatValue, v1 bool) {
		beat++
		h.Beat = beat
		p := appendHeartbeat(nil, h, nil)
		if v1 { // an earlier feeder's heartbeat: no polled head
			p = header(nil, nil)
			for _, x := range []uint64{h.Term, uint64(h.Head), h.Beat} {
				p = append(p, byte(x), byte(x>>8), byte(x>>16), byte(x>>24), byte(x>>32), byte(x>>40), byte(x>>48), byte(x>>56))
			}
			p = seal(p, 0, domainHead, nil)
		}
		st.Put(ctx, keyHead, p)
	}
	wantNone := func(step string) {
		t.Helper()
		if pos, _, err := in.HeadAge(ctx); !errors.Is(err, ErrNoPolledHead) {
			t.Fatalf("%s: HeadAge = %v, %v; want ErrNoPolledHead", step, pos, err)
		}
	}
	wantHead := func(step string, want changefeed.Position, minAge time.Duration) {
		t.Helper()
		pos, age, err := in.HeadAge(ctx)
		if err != nil || pos != want || age < minAge {
			t.Fatalf("%s: HeadAge = %v, %v, %v; want %v, at least %v old", step, pos, age, err, want, minAge)
		}
	}
	// The first heartbeats an instance reads: no read of ours showed a
	// read older than the feeder's previous one, so nothing bounds when
	// the head was read.
	put(beatValue{Term: 2, Head: 900, Poll: 1, Polled: 900, Gap: -1}, false)
	wantNone("the first heartbeat read")
	put(beatValue{Term: 2, Head: 900, Poll: 2, Polled: 900, Gap: 10 * time.Millisecond}, false)
	wantNone("the second read of the term, its previous read's write not seen missing")
	before := time.Now()
	put(beatValue{Term: 2, Head: 950, Poll: 3, Polled: 950, Gap: 10 * time.Millisecond}, false)
	wantHead("read 3", 950, 0)
	if _, age, _ := in.HeadAge(ctx); age > time.Since(before)+time.Second {
		t.Fatalf("age %v, more than since the read that saw read 1 (%v)", age, time.Since(before))
	}
	// A replay of an older read changes nothing.
	put(beatValue{Term: 2, Head: 900, Poll: 2, Polled: 900, Gap: 10 * time.Millisecond}, false)
	wantHead("read 2 replayed", 950, 0)
	// An earlier feeder's heartbeat of a newer term: still the term-2 head.
	put(beatValue{Term: 3, Head: 2000, Gap: -1}, true)
	wantHead("an old-format heartbeat", 950, 0)
	// A new term's first read bounds nothing; its second does.
	put(beatValue{Term: 4, Head: 960, Poll: 1, Polled: 3000, Gap: -1}, false)
	wantHead("term 4's first read", 950, 0)
	put(beatValue{Term: 4, Head: 970, Poll: 2, Polled: 3100, Gap: 10 * time.Millisecond}, false)
	wantHead("term 4's second read", 3100, 0)
	// An older term's read, replayed, is not newer.
	put(beatValue{Term: 2, Head: 9000, Poll: 7, Polled: 9000, Gap: 0}, false)
	wantHead("term 2 replayed", 3100, 0)
	// Reads skipped: bounded by the latest heartbeat read of ours.
	put(beatValue{Term: 4, Head: 970, Poll: 5, Polled: 3500, Gap: 10 * time.Millisecond}, false)
	wantHead("term 4's fifth read", 3500, 0)
	// A read whose previous one was never written: no bound.
	put(beatValue{Term: 4, Head: 970, Poll: 6, Polled: 3600, Gap: -1}, false)
	wantHead("a read with an unknown gap", 3500, 0)
	// A heartbeat without a poll from the start never makes an instance
	// fresh.
	in2, _ := NewInstance(Backend{Name: "t", Log: nopLog{}, Store: st}, InstanceConfig{HeadTimeout: time.Hour})
	for range 3 {
		put(beatValue{Term: 5, Head: 4000, Gap: -1}, false)
		if _, _, err := in2.HeadAge(ctx); !errors.Is(err, ErrNoPolledHead) {
			t.Fatalf("a term without a poll: %v, want ErrNoPolledHead", err)
		}
	}
}

// nopLog satisfies Backend.check; HeadAge reads no log.
type nopLog struct{}

func (nopLog) Append(context.Context, Cursor, []byte) (Cursor, error) { return "", errors.New("no") }
func (nopLog) Last(context.Context) (Entry, Cursor, error)            { return Entry{}, "", nil }
func (nopLog) Read(context.Context, Cursor, func(Entry) error) error  { return errors.New("no") }
