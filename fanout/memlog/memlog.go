// Package memlog is an in-memory fan-out transport: a fanout.Log, Lease and
// Store held in one process. It carries a set between gates of the same
// process (tests, benchmarks, an embedded deployment with several gates)
// and is the reference implementation of the adapter contract: the
// conformance suite (internal/fanouttest.Conformance) runs against it as
// against fanout/jetstream and fanout/redisstream.
//
// A Set is safe for concurrent use.
package memlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/fanout"
)

// Config configures a Set. The zero value of every field means its
// default.
type Config struct {
	// Set names the set in logs. Default: "memlog".
	Set string
	// LeaseTTL is the feeder lease's lifetime without renewal. Default:
	// 2 s.
	LeaseTTL time.Duration
	// Key, if set, authenticates every message (fanout.Backend.Key).
	Key []byte
	// Now is the clock of lease expiry. Default: time.Now.
	Now func() time.Time
}

// Set is one fanned-out set's log, lease and store.
type Set struct {
	cfg Config

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every append or deletion
	entries []entry       // in order; a deleted entry is absent
	lastSeq uint64        // the highest sequence ever appended
	term    uint64
	holder  string
	expires time.Time
	values  map[string]value
	rev     uint64
	objects map[string][]byte
}

type entry struct {
	seq  uint64
	data []byte
}

type value struct {
	data []byte
	rev  uint64
}

// New returns an empty set.
func New(cfg Config) *Set {
	if cfg.Set == "" {
		cfg.Set = "memlog"
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Set{cfg: cfg, changed: make(chan struct{}), values: map[string]value{}, objects: map[string][]byte{}}
}

// Backend returns the set's backend for fanout.NewFeeder and
// fanout.NewInstance.
func (s *Set) Backend() fanout.Backend {
	return fanout.Backend{Name: s.cfg.Set, Log: (*memLog)(s), Store: (*memStore)(s),
		NewLease: func() fanout.Lease { return &memLease{s: s} }, LeaseTTL: s.cfg.LeaseTTL, Key: s.cfg.Key}
}

// NewFeeder returns a feeder of the set.
func (s *Set) NewFeeder(cfg fanout.FeederConfig) (*fanout.Feeder, error) {
	return fanout.NewFeeder(s.Backend(), cfg)
}

// NewInstance returns an instance of the set.
func (s *Set) NewInstance(cfg fanout.InstanceConfig) (*fanout.Instance, error) {
	return fanout.NewInstance(s.Backend(), cfg)
}

// Delete removes the entry at cur, as a server that lost it would: a Read
// across it reports a gap.
func (s *Set) Delete(cur fanout.Cursor) error {
	seq, err := seqOf(cur)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := slices.BinarySearchFunc(s.entries, seq, func(e entry, seq uint64) int { return cmpU(e.seq, seq) })
	if !ok {
		return fmt.Errorf("memlog: no entry %s", cur)
	}
	s.entries = slices.Delete(s.entries, i, i+1)
	s.notifyLocked()
	return nil
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Set) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func seqOf(c fanout.Cursor) (uint64, error) {
	if c == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(string(c), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memlog: bad cursor %q", c)
	}
	return n, nil
}

func cursor(seq uint64) fanout.Cursor { return fanout.Cursor(strconv.FormatUint(seq, 10)) }

type memLog Set

func (l *memLog) Append(ctx context.Context, after fanout.Cursor, data []byte) (fanout.Cursor, error) {
	s := (*Set)(l)
	seq, err := seqOf(after)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastSeq != seq {
		// An earlier attempt of ours may be the entry right after.
		i, ok := slices.BinarySearchFunc(s.entries, seq+1, func(e entry, seq uint64) int { return cmpU(e.seq, seq) })
		if ok && bytes.Equal(s.entries[i].data, data) {
			return cursor(seq + 1), nil
		}
		return "", fmt.Errorf("%w: the log's last sequence is %d, not %d", fanout.ErrFenced, s.lastSeq, seq)
	}
	s.lastSeq++
	s.entries = append(s.entries, entry{s.lastSeq, bytes.Clone(data)})
	s.notifyLocked()
	return cursor(s.lastSeq), nil
}

func (l *memLog) Last(ctx context.Context) (fanout.Entry, fanout.Cursor, error) {
	s := (*Set)(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	tail := cursor(s.lastSeq)
	if n := len(s.entries); n > 0 {
		e := s.entries[n-1]
		return fanout.Entry{Cursor: cursor(e.seq), Data: bytes.Clone(e.data)}, tail, nil
	}
	return fanout.Entry{Cursor: tail}, tail, nil
}

func (l *memLog) Read(ctx context.Context, after fanout.Cursor, fn func(fanout.Entry) error) error {
	s := (*Set)(l)
	seq, err := seqOf(after)
	if err != nil {
		return err
	}
	next := seq + 1
	for {
		s.mu.Lock()
		i, _ := slices.BinarySearchFunc(s.entries, next, func(e entry, seq uint64) int { return cmpU(e.seq, seq) })
		batch := slices.Clone(s.entries[i:])
		changed := s.changed
		last := s.lastSeq
		s.mu.Unlock()
		for _, e := range batch {
			if e.seq != next {
				return fmt.Errorf("%w: entry %d is missing (next is %d)", fanout.ErrGap, next, e.seq)
			}
			if err := fn(fanout.Entry{Cursor: cursor(e.seq), Data: e.data}); err != nil {
				return err
			}
			next++
		}
		if len(batch) == 0 && last >= next {
			return fmt.Errorf("%w: entries %d to %d are missing", fanout.ErrGap, next, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

type memLease struct {
	s    *Set
	term uint64
}

func (l *memLease) Acquire(ctx context.Context, holder string) (uint64, error) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	if s.holder != "" && s.holder != holder && now.Before(s.expires) {
		return 0, fmt.Errorf("%w: by %s", fanout.ErrHeld, s.holder)
	}
	s.term++
	s.holder, s.expires, l.term = holder, now.Add(s.cfg.LeaseTTL), s.term
	return s.term, nil
}

func (l *memLease) Renew(ctx context.Context) error {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	if l.term == 0 || s.term != l.term || !now.Before(s.expires) {
		return fmt.Errorf("%w: term %d", fanout.ErrLost, l.term)
	}
	s.expires = now.Add(s.cfg.LeaseTTL)
	return nil
}

func (l *memLease) Release(ctx context.Context) error {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.term != 0 && s.term == l.term {
		s.holder, s.expires = "", time.Time{}
	}
	return nil
}

type memStore Set

func (m *memStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", fanout.ErrNotFound, key)
	}
	return bytes.Clone(v.data), v.rev, nil
}

func (m *memStore) Put(ctx context.Context, key string, val []byte) error {
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	s.values[key] = value{bytes.Clone(val), s.rev}
	return nil
}

func (m *memStore) CompareAndPut(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.values[key].rev != rev {
		return 0, fmt.Errorf("%w: %s", fanout.ErrConflict, key)
	}
	s.rev++
	s.values[key] = value{bytes.Clone(val), s.rev}
	return s.rev, nil
}

func (m *memStore) PutObject(ctx context.Context, name string, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[name] = b
	return nil
}

func (m *memStore) GetObject(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[name]
	if !ok {
		return nil, 0, fmt.Errorf("%w: object %s", fanout.ErrNotFound, name)
	}
	return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
}

func (m *memStore) Objects(ctx context.Context) ([]string, error) {
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.objects))
	for n := range s.objects {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (m *memStore) DeleteObject(ctx context.Context, name string) error {
	s := (*Set)(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, name)
	return nil
}
