package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// FeederConfig configures a Feeder. The zero value of every field but Feed
// and Gate means its default.
type FeederConfig struct {
	// Feed is the database's change feed, such as source/postgres.Feed.
	// Required. Only the lease holder uses it.
	Feed changefeed.Feed
	// Gate is the feeder's own gate, as a Follower (bloomgate.Gate.Follower,
	// whose FollowConfig gives the Identity instances must share, how often
	// a snapshot is uploaded, MaxLag): it follows Feed, and its snapshots
	// are the ones instances start from. Required; the gate may serve
	// lookups too.
	Gate changefeed.Follower
	// ID names this feeder in the lease. Default: host name, process id and
	// the start time.
	ID string
	// HeartbeatInterval is how often the lease holder reads the database's
	// head and writes it to the heartbeat (it also writes the newest
	// position the feed delivered as transactions arrive, one write at a
	// time). A starting instance can vouch for its freshness only with a
	// head read two reads after its first look at the heartbeat (see
	// Instance.HeadAge), so it becomes ready one to two intervals after
	// that look at the earliest: the interval bounds how fast instances
	// join. Each interval costs one query on the database and one write to
	// the store. Default: 25 ms.
	HeartbeatInterval time.Duration
	// MaxBatch bounds the transactions per message. Default: 256.
	MaxBatch int
	// PublishTimeout bounds one append attempt; failed attempts are retried
	// until the lease ends. Default: 5 s.
	PublishTimeout time.Duration
}

// Defaults of FeederConfig's fields.
const (
	DefaultHeartbeatInterval = 25 * time.Millisecond
	DefaultMaxBatch          = 256
	DefaultPublishTimeout    = 5 * time.Second
)

// ErrInvalidConfig reports a FeederConfig or InstanceConfig that cannot be
// used.
var ErrInvalidConfig = errors.New("fanout: invalid config")

// Feeder is the one process per set that follows the database: whichever
// Feeder holds the lease runs Gate.Follow over Feed, appending every
// transaction (progress markers included) to the log before the gate
// applies it and confirming it to Feed only after the log acknowledged it;
// the gate's snapshots are uploaded to the Store with the log cursor that
// follows them. Guarantees:
//
//   - One publisher: the lease picks one feeder and gives it a term larger
//     than every earlier one; a feeder that could not renew for 3/4 of the
//     lease TTL stops. Append is fenced by the entry the feeder appended
//     last, so a stale feeder is refused, and every batch carries the term
//     (instances refuse a term older than one they applied).
//   - Nothing lost: Feed only learns a position is consumed once the log
//     holds it. A new lease holder starts from the newest snapshot, replays
//     the log's tail into its gate and continues Feed from the tail's end.
//   - Heals itself: a tail it cannot continue — damaged, not signed with
//     Key, not continuing its snapshot, ahead of the database's head, an
//     entry someone else appended after its own, a history the log lost —
//     makes it start a new history: bootstrap from the database, upload a
//     snapshot, append from it. Instances move to it through that snapshot.
//     It never continues from a position the database did not give it.
//
// Run blocks; a Feeder is safe for concurrent use.
type Feeder struct {
	b    Backend
	cfg  FeederConfig
	term atomic.Uint64 // the lease term held now; 0: none
}

// Leading reports whether the feeder holds the lease now: it publishes
// the set's log and heartbeat (the process's role is "feeder"); false
// while it waits for the lease ("standby").
func (f *Feeder) Leading() bool { return f.term.Load() != 0 }

// NewFeeder returns a feeder for the set b describes. Adapters call it
// (jetstream.Set.NewFeeder, redisstream.Set.NewFeeder).
func NewFeeder(b Backend, cfg FeederConfig) (*Feeder, error) {
	if err := b.check(true); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case cfg.Feed == nil || cfg.Gate == nil:
		return nil, fmt.Errorf("%w: Feed and Gate are required", ErrInvalidConfig)
	case cfg.HeartbeatInterval < 0 || cfg.MaxBatch < 0 || cfg.PublishTimeout < 0:
		return nil, fmt.Errorf("%w: negative HeartbeatInterval, MaxBatch or PublishTimeout", ErrInvalidConfig)
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())
	}
	defaults.Set(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	defaults.Set(&cfg.MaxBatch, DefaultMaxBatch)
	defaults.Set(&cfg.PublishTimeout, DefaultPublishTimeout)
	return &Feeder{b: b, cfg: cfg}, nil
}

// Run competes for the lease and, while it holds it, follows Feed and
// publishes. It returns ctx's error when ctx is done (releasing the lease),
// or the gate's error wrapping changefeed.ErrClosed when the gate is
// closed.
func (f *Feeder) Run(ctx context.Context) error {
	log := f.b.Logger
	for {
		lease := f.b.NewLease()
		term, err := f.acquire(ctx, lease)
		if err != nil {
			return err
		}
		log.Info("bloomgate: feeder lease acquired", "set", f.b.Name, "id", f.cfg.ID, "term", term)
		f.term.Store(term)
		lctx, cancel := context.WithCancel(ctx)
		pub := &publisher{f: f, term: term, lease: lease, cancel: cancel, beat: make(chan struct{}, 1), firstPoll: make(chan struct{})}
		pub.startGen(lctx)
		var wg sync.WaitGroup
		wg.Go(func() { pub.hold(lctx) })
		wg.Go(func() { pub.heartbeat(lctx) })
		err = f.cfg.Gate.Follow(lctx, pub, &snapshots{b: &f.b, pub: pub, loaded: pub.loaded})
		f.term.Store(0)
		cancel()
		wg.Wait()
		rctx, rcancel := context.WithTimeout(context.Background(), f.b.LeaseTTL)
		lease.Release(rctx)
		rcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, changefeed.ErrClosed) {
			return err
		}
		log.Warn("bloomgate: feeder lease lost", "set", f.b.Name, "id", f.cfg.ID, "term", term)
	}
}

// acquire waits until it holds the lease.
func (f *Feeder) acquire(ctx context.Context, lease Lease) (uint64, error) {
	every := max(f.b.LeaseTTL/8, 20*time.Millisecond)
	for {
		term, err := lease.Acquire(ctx, f.cfg.ID)
		if err == nil {
			return term, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !errors.Is(err, ErrHeld) {
			f.b.Logger.Warn("bloomgate: feeder lease", "set", f.b.Name, "err", err)
		}
		if backoff.Sleep(ctx, every) != nil {
			return 0, ctx.Err()
		}
	}
}

// publisher is the changefeed.Feed the feeder's gate follows during one
// lease term: Feed, with every transaction appended to the log before it
// is applied.
type publisher struct {
	f      *Feeder
	term   uint64
	lease  Lease
	cancel context.CancelFunc // ends the term

	// leaseMu serialises Renew: the holder's renewals and an append that
	// was fenced both renew, and a Lease serves one caller at a time (two
	// renewals of the same revision at once would find the lease lost).
	leaseMu sync.Mutex

	mu        sync.Mutex
	marks     []mark              // position → cursor after it, increasing
	published changefeed.Position // the newest position the feed delivered (or the log's tail held)
	dbHead    changefeed.Position
	poll      uint64              // database head reads in this term
	polled    changefeed.Position // the newest head read
	gap       time.Duration       // from firstOK of the previous read to this read; <0: unknown
	firstOK   time.Time           // when the first heartbeat of this read was written; zero: not yet
	firstPoll chan struct{}       // closed by the term's first head read
	headFails int                 // head reads failed in a row
	beat      chan struct{}       // asks the heartbeat for a write now
	baseGen   uint64              // the generation of the filter loaded (or the newest recorded)
	baseBuild uint64              // the gate's Builds() then
}

// startGen starts counting filter generations from the newest record's.
func (p *publisher) startGen(ctx context.Context) {
	ss := snapshots{b: &p.f.b}
	recs, _, _ := ss.records(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		p.baseGen = max(p.baseGen, r.Gen)
	}
	p.baseBuild = p.f.cfg.Gate.Builds()
}

// gen is the generation of the gate's filter now: every build (a
// bootstrap, a rebuild) since the one loaded is one more.
func (p *publisher) gen() uint64 {
	b := p.f.cfg.Gate.Builds()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.baseGen + b - p.baseBuild
}

// mark says where to read the log from to continue after pos.
type mark struct {
	pos changefeed.Position
	cur Cursor
}

var _ changefeed.Feed = (*publisher)(nil)

// hold renews the lease until ctx is done or the lease is lost (then it
// ends the term).
func (p *publisher) hold(ctx context.Context) {
	ttl := p.f.b.LeaseTTL
	renewed := time.Now()
	t := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, ttl/4)
		err := p.renew(rctx)
		cancel()
		switch {
		case err == nil:
			renewed = time.Now()
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrLost):
			p.f.b.Logger.Warn("bloomgate: feeder lease taken over", "set", p.f.b.Name, "err", err)
			p.cancel()
			return
		case time.Since(renewed) > ttl*3/4:
			p.f.b.Logger.Warn("bloomgate: feeder lease not renewed in time", "set", p.f.b.Name, "err", err)
			p.cancel()
			return
		}
	}
}

// renew renews the lease, one call at a time.
func (p *publisher) renew(ctx context.Context) error {
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	return p.lease.Renew(ctx)
}

// heartbeat writes the heartbeat every HeartbeatInterval, and at once when
// the feed delivers a transaction: the term, the newest database position
// the feeder knows, and the database head it last read itself. A term
// starts with a read of the database's head and writes no heartbeat before
// one succeeds: a new feeder's own position (its snapshot's, or a stream
// catching up after an outage) is not the database's head, and an instance
// that took it for one would count itself fresh while far behind.
//
// The head is read beside the writes (pollHeads), not between them: a slow
// read of the database would otherwise hold back the write that vouches
// for a batch, and every instance with it.
func (p *publisher) heartbeat(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.pollHeads(ctx) })
	var beat uint64
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.beat:
		}
		p.mu.Lock()
		h := beatValue{Term: p.term, Head: max(p.dbHead, p.published), Poll: p.poll, Polled: p.polled, Gap: p.gap}
		p.mu.Unlock()
		if h.Poll == 0 {
			continue // pollHeads asks again once it has read the head
		}
		beat = max(beat+1, uint64(time.Now().UnixNano()))
		h.Beat = beat
		buf = appendHeartbeat(buf[:0], h, p.f.b.Key)
		err := p.f.b.Store.Put(ctx, keyHead, buf)
		switch {
		case err == nil:
			// Instances bound the next read's time by this write's: it is
			// complete, so visible, before that read begins. Only a write
			// of the newest read counts (a read may have ended meanwhile).
			p.mu.Lock()
			if p.firstOK.IsZero() && p.poll == h.Poll {
				p.firstOK = time.Now()
			}
			p.mu.Unlock()
		case ctx.Err() == nil:
			p.f.b.Logger.Warn("bloomgate: feeder heartbeat", "set", p.f.b.Name, "err", err)
		}
	}
}

// pollHeads reads the database's head every HeartbeatInterval (every
// 100 ms while no read has succeeded in this term), and has the heartbeat
// written after each read.
func (p *publisher) pollHeads(ctx context.Context) {
	every := p.f.cfg.HeartbeatInterval
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.pollHead(ctx)
		p.wakeHeartbeat()
		p.mu.Lock()
		next := every
		if p.poll == 0 {
			next = min(every, 100*time.Millisecond)
		}
		p.mu.Unlock()
		t.Reset(next)
	}
}

// wakeHeartbeat asks the heartbeat for a write now (one pending request
// covers every change made before it is served).
func (p *publisher) wakeHeartbeat() {
	select {
	case p.beat <- struct{}{}:
	default:
	}
}

// pollHead reads the database's head, noting the time before the read.
func (p *publisher) pollHead(ctx context.Context) {
	at := time.Now()
	h, err := p.f.cfg.Feed.Head(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		// Logged once per run of failures: instances see the head age
		// and fail open by themselves.
		if p.headFails++; p.headFails == 1 && ctx.Err() == nil {
			p.f.b.Logger.Warn("bloomgate: feeder cannot read the database's head; instances fail open past their MaxLag until it can",
				"set", p.f.b.Name, "err", err)
		}
		return
	}
	if p.headFails > 0 {
		p.f.b.Logger.Info("bloomgate: feeder reads the database's head again", "set", p.f.b.Name, "failed_reads", p.headFails)
		p.headFails = 0
	}
	p.dbHead = max(p.dbHead, h)
	p.polled = max(p.polled, h)
	p.gap = -1
	if !p.firstOK.IsZero() && !p.firstOK.After(at) {
		// A write of the previous read that completed after this read
		// began gives no bound (unknown).
		p.gap = at.Sub(p.firstOK)
	}
	p.firstOK = time.Time{}
	if p.poll++; p.poll == 1 {
		close(p.firstPoll)
	}
}

func (p *publisher) note(pos changefeed.Position, cur Cursor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.marks); n > 0 && p.marks[n-1].pos >= pos {
		p.marks = p.marks[:sort.Search(n, func(i int) bool { return p.marks[i].pos >= pos })]
	}
	if len(p.marks) >= 1<<20 {
		p.marks = append(p.marks[:0], p.marks[len(p.marks)/2:]...)
	}
	p.marks = append(p.marks, mark{pos, cur})
}

// cursorOf returns the cursor to read after pos, and forgets the positions
// before it (snapshots only move forward).
func (p *publisher) cursorOf(pos changefeed.Position) (Cursor, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.marks), func(i int) bool { return p.marks[i].pos >= pos })
	if i == len(p.marks) || p.marks[i].pos != pos {
		return "", false
	}
	cur := p.marks[i].cur
	p.marks = p.marks[i:]
	return cur, true
}

// loaded learns the cursor of the snapshot the gate loaded.
func (p *publisher) loaded(pos changefeed.Position, cur Cursor, _, gen uint64, _ bool) {
	b := p.f.cfg.Gate.Builds()
	p.mu.Lock()
	p.marks = p.marks[:0]
	p.baseGen, p.baseBuild = max(p.baseGen, gen), b
	p.mu.Unlock()
	p.note(pos, cur)
}

// Bootstrap starts a new history: the database's keys at a point, which
// the log continues from after its current last entry.
func (p *publisher) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	_, tail, err := p.f.b.Log.Last(ctx)
	if err != nil {
		return 0, err
	}
	pos, err := p.f.cfg.Feed.Bootstrap(ctx, fn)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.marks = p.marks[:0]
	p.dbHead = max(p.dbHead, pos)
	p.mu.Unlock()
	p.note(pos, tail)
	p.f.b.Logger.Info("bloomgate: feeder starts a new history of the log", "set", p.f.b.Name, "position", pos, "after", tail)
	return pos, nil
}

func (p *publisher) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return p.f.cfg.Feed.Rebuild(ctx, fn)
}

func (p *publisher) Head(ctx context.Context) (changefeed.Position, error) {
	return p.f.cfg.Feed.Head(ctx)
}

// Confirm does nothing: Stream confirms to Feed once the log holds a
// transaction.
func (p *publisher) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }

// errHeal marks the errors that make the feeder start a new history.
var errHeal = fmt.Errorf("%w: the feeder starts a new history", ErrGap)

// errReplayed ends the replay of the log's tail.
var errReplayed = errors.New("fanout: replay reached the tail")

// Stream replays the log's tail after from into apply, checking every
// entry as an instance would (and against the database's head), then
// follows Feed from the tail's end, appending each batch before applying
// it. A tail it cannot continue is an error wrapping ErrGap (so Follow
// bootstraps: a new history).
func (p *publisher) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	log := p.f.b.Log
	last, tail, err := log.Last(ctx)
	if err != nil {
		return err
	}
	cur, ok := p.cursorOf(from)
	if !ok {
		return fmt.Errorf("%w: no log cursor known for position %v", errHeal, from)
	}
	pos := from
	if cur != tail {
		if tail != last.Cursor {
			return fmt.Errorf("%w: the log lost its newest entries (it ends at %q, appends go after %q)", errHeal, last.Cursor, tail)
		}
		if last.Data == nil {
			return fmt.Errorf("%w: the log lost the entries after %v (it holds none)", errHeal, from)
		}
		if b, err := DecodeBatch(last.Data, p.f.b.Key); err == nil && b.End() < from {
			// The snapshot reflects entries the log no longer holds (an
			// unsynced tail lost with its servers, say).
			return fmt.Errorf("%w: the log ends at %v, before the snapshot at %v", errHeal, b.End(), from)
		}
		dbHead, err := p.f.cfg.Feed.Head(ctx)
		if err != nil {
			return err
		}
		var prevTerm uint64
		err = log.Read(ctx, cur, func(e Entry) error {
			b, err := DecodeBatch(e.Data, p.f.b.Key)
			if err != nil {
				return fmt.Errorf("%w: entry %s: %w", errHeal, e.Cursor, err)
			}
			switch {
			case b.Term > p.term:
				p.cancel() // a newer feeder wrote it: this term is over
				return fmt.Errorf("fanout: entry %s has term %d, newer than ours (%d)", e.Cursor, b.Term, p.term)
			case b.Term < prevTerm:
				return fmt.Errorf("%w: entry %s: term %d after term %d", errHeal, e.Cursor, b.Term, prevTerm)
			case b.End() > dbHead:
				return fmt.Errorf("%w: entry %s ends at %v, beyond the database's head %v", errHeal, e.Cursor, b.End(), dbHead)
			}
			prevTerm = b.Term
			txns, err := Continue(pos, b)
			if err != nil {
				return fmt.Errorf("%w: entry %s: %w", errHeal, e.Cursor, err)
			}
			for i, t := range txns {
				if i < len(txns)-1 {
					p.note(t.End, cur)
				} else {
					p.note(t.End, e.Cursor)
				}
				if err := apply(t); err != nil {
					return err
				}
				pos = t.End
			}
			cur = e.Cursor
			if e.Cursor == last.Cursor {
				return errReplayed
			}
			return nil
		})
		if !errors.Is(err, errReplayed) {
			if errors.Is(err, ErrGap) && !errors.Is(err, errHeal) {
				err = fmt.Errorf("%w: %w", errHeal, err)
			}
			return err
		}
	}
	p.mu.Lock()
	p.published = max(p.published, pos)
	p.mu.Unlock()
	return p.follow(ctx, pos, tail, apply)
}

// follow runs Feed from pos, appending after the entry at after.
func (p *publisher) follow(ctx context.Context, pos changefeed.Position, after Cursor, apply func(changefeed.Txn) error) error {
	q := make(chan changefeed.Txn, p.f.cfg.MaxBatch)
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var pubErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		pubErr = p.publishLoop(sctx, q, pos, after, apply)
		cancel(pubErr)
	}()
	err := p.f.cfg.Feed.Stream(sctx, pos, func(t changefeed.Txn) error {
		// The database has reached t.End (the feed delivered it): the
		// heartbeat says so before t is even batched, so that an instance
		// finds a batch covered when it reads it, instead of waiting for a
		// heartbeat written beside the append.
		p.mu.Lock()
		p.published = max(p.published, t.End)
		p.mu.Unlock()
		p.wakeHeartbeat()
		select {
		case q <- t:
			return nil
		case <-sctx.Done():
			return context.Cause(sctx)
		}
	})
	cancel(nil)
	<-done
	if pubErr != nil && ctx.Err() == nil && !errors.Is(pubErr, context.Canceled) {
		return pubErr
	}
	return err
}

// maxInFlight bounds the batches in flight on a Log that pipelines
// (AsyncAppender): enough to keep appending through a replicated append's
// round trip, few enough that a failure sends little again.
const maxInFlight = 8

// sent is a batch appended, or in flight on an AsyncAppender.
type sent struct {
	txns   []changefeed.Txn
	data   []byte
	after  Cursor // the entry it goes after
	cur    Cursor // its own
	end    changefeed.Position
	at     time.Time    // when it was sent
	done   <-chan error // nil: appended (Append)
	cancel context.CancelFunc
	// unsent: AppendAsync failed at once, so cur is unknown; nothing is
	// sent after it before it is settled.
	unsent bool
}

// publishLoop appends what q holds in batches — whatever has arrived when
// the log can take another batch, up to MaxBatch: it never waits to fill
// one — then applies and confirms each batch once the log holds it and
// every batch before it. On a Log that pipelines, up to maxInFlight
// batches are in flight; when one fails, it and those after it are
// appended again one by one (Append recognises what an earlier attempt
// stored), so the log holds them in order, each exactly once.
func (p *publisher) publishLoop(ctx context.Context, q <-chan changefeed.Txn, prev changefeed.Position, after Cursor, apply func(changefeed.Txn) error) error {
	// Nothing is appended before the term's first read of the database's
	// head (the heartbeat's).
	select {
	case <-p.firstPoll:
	case <-ctx.Done():
		return ctx.Err()
	}
	async, _ := p.f.b.Log.(AsyncAppender)
	var window []*sent
	defer func() {
		for _, s := range window {
			s.cancel()
		}
	}()
	for {
		var take <-chan changefeed.Txn
		if n := len(window); n == 0 || n < maxInFlight && !window[n-1].unsent {
			take = q
		}
		var head <-chan error
		if len(window) > 0 {
			head = window[0].done
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case t := <-take:
			s, err := p.send(ctx, async, t, q, prev, after)
			if err != nil {
				return err
			}
			prev, after = s.end, s.cur
			if s.done != nil {
				window = append(window, s)
				continue
			}
			if err := p.applied(ctx, s, apply, len(q)); err != nil {
				return err
			}
		case err := <-head:
			if err != nil {
				p.f.b.Logger.Warn("bloomgate: feeder append failed, appending again one by one", "set", p.f.b.Name,
					"end", window[0].end, "in_flight", len(window), "err", err)
				var rerr error
				if after, rerr = p.resend(ctx, window); rerr != nil {
					return rerr
				}
			} else {
				window[0].done = nil
			}
			for len(window) > 0 && window[0].done == nil {
				s := window[0]
				window = window[1:]
				s.cancel()
				if err := p.applied(ctx, s, apply, len(q)); err != nil {
					return err
				}
			}
		}
	}
}

// send appends a batch of t and what q holds after it (up to MaxBatch)
// after the entry at after: sent on an AsyncAppender (done set), else
// appended.
func (p *publisher) send(ctx context.Context, async AsyncAppender, t changefeed.Txn, q <-chan changefeed.Txn, prev changefeed.Position, after Cursor) (*sent, error) {
	batch := []changefeed.Txn{t}
drain:
	for len(batch) < p.f.cfg.MaxBatch {
		select {
		case t := <-q:
			batch = append(batch, t)
		default:
			break drain
		}
	}
	data, err := AppendBatch(nil, Batch{Term: p.term, Prev: prev, Txns: batch}, p.f.b.Key)
	if err != nil {
		return nil, err
	}
	s := &sent{txns: batch, data: data, after: after, end: batch[len(batch)-1].End, at: time.Now(), cancel: func() {}}
	if async == nil {
		s.cur, err = p.append(ctx, after, data, s.end)
		return s, err
	}
	actx, cancel := context.WithTimeout(ctx, p.f.cfg.PublishTimeout)
	cur, done, err := async.AppendAsync(actx, after, data)
	if err != nil {
		// Settled in its turn, as a failed append in flight: the ones
		// before it may still be stored.
		failed := make(chan error, 1)
		failed <- err
		cur, done, s.unsent = "", failed, true
	}
	s.cur, s.done, s.cancel = cur, done, cancel
	return s, nil
}

// resend appends window's batches again one by one, in order, the first
// after the entry its send went after, and returns the last one's cursor.
// Each is then appended (done nil).
func (p *publisher) resend(ctx context.Context, window []*sent) (Cursor, error) {
	after := window[0].after
	for _, s := range window {
		s.cancel()
		cur, err := p.append(ctx, after, s.data, s.end)
		if err != nil {
			return "", err
		}
		s.after, s.cur, s.done, s.cancel = after, cur, nil, func() {}
		after = cur
	}
	return after, nil
}

// applied applies an appended batch to the feeder's gate and confirms it
// to the feed.
func (p *publisher) applied(ctx context.Context, s *sent, apply func(changefeed.Txn) error, queued int) error {
	if log := p.f.b.Logger; log.Enabled(ctx, slog.LevelDebug) {
		log.Debug("bloomgate: feeder published", "cursor", s.cur, "txns", len(s.txns), "bytes", len(s.data),
			"since_commit", time.Since(s.txns[len(s.txns)-1].Time), "since_sent", time.Since(s.at), "queued", queued)
	}
	for i, t := range s.txns {
		if i < len(s.txns)-1 {
			p.note(t.End, s.after)
		} else {
			p.note(t.End, s.cur)
		}
		if err := apply(t); err != nil {
			return err
		}
	}
	if err := p.f.cfg.Feed.Confirm(ctx, s.end); err != nil && ctx.Err() == nil {
		p.f.b.Logger.Warn("bloomgate: feeder confirm", "set", p.f.b.Name, "err", err)
	}
	return nil
}

// append appends one batch after the entry at after, retrying failed
// attempts until ctx is done. Fenced while the lease is still ours, the
// entry after ours is someone else's: a new history (errHeal).
func (p *publisher) append(ctx context.Context, after Cursor, data []byte, end changefeed.Position) (Cursor, error) {
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		actx, cancel := context.WithTimeout(ctx, p.f.cfg.PublishTimeout)
		cur, err := p.f.b.Log.Append(actx, after, data)
		cancel()
		if err == nil {
			return cur, nil
		}
		if errors.Is(err, ErrFenced) {
			rctx, cancel := context.WithTimeout(ctx, p.f.b.LeaseTTL/4)
			lerr := p.renew(rctx)
			cancel()
			if lerr != nil {
				p.cancel()
				return "", fmt.Errorf("fanout: fenced, and the lease: %w", lerr)
			}
			return "", fmt.Errorf("%w: someone else appended after entry %s: %w", errHeal, after, err)
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		p.f.b.Logger.Warn("bloomgate: feeder append failed, retrying", "set", p.f.b.Name, "end", end, "err", err)
		if bo.Wait(ctx) != nil {
			return "", ctx.Err()
		}
	}
}
