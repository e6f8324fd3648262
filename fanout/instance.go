package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Instance errors.
var (
	// ErrSnapshotOnly is returned by an Instance's Bootstrap and Rebuild:
	// instances never scan the database; they start from the feeder's
	// snapshots. Follow then fails open and tries again (with backoff), and
	// starts from the newest snapshot once one is there; while none is
	// recorded at all, Bootstrap first waits up to 30 s for the first.
	ErrSnapshotOnly = errors.New("fanout: instances start only from the feeder's snapshots")
	// ErrStaleHead is returned by Head when the feeder's heartbeat has not
	// changed for InstanceConfig.HeadTimeout: no feeder is publishing.
	ErrStaleHead = errors.New("fanout: the feeder's heartbeat is stale")
)

// InstanceConfig configures an Instance. The zero value of every field
// means its default.
type InstanceConfig struct {
	// HeadTimeout is how long the feeder's heartbeat may stay unchanged
	// before Head reports ErrStaleHead. Follow then stops seeing the head
	// advance, and the gate fails open once its applied position is more
	// than FollowConfig.MaxLag old: with no feeder, an instance stops
	// answering "absent" within HeadTimeout + MaxLag. It is also how long a
	// batch beyond the heartbeat's head (or of a newer term) is held for a
	// heartbeat that covers it before it is refused as a gap. Keep it a few
	// FeederConfig.HeartbeatIntervals. Default: 5 s.
	HeadTimeout time.Duration
	// Local, if set, keeps this instance's own snapshots (such as
	// bloomgate.DirSnapshots(dir)): Save writes there, and Load starts from
	// the newest local snapshot when it is at least as new as the feeder's
	// newest, so a restart reads a local file and only the log's tail.
	// Default: nil, Save does nothing and every start fetches the feeder's
	// snapshot.
	Local changefeed.SnapshotStore
}

// DefaultHeadTimeout is InstanceConfig.HeadTimeout's default.
const DefaultHeadTimeout = 5 * time.Second

// Instance is the instance side of a set: a bloomgate.Feed over the log,
// for Gate.Follow with FollowConfig.Snapshots set to Snapshots():
//
//	g.Follow(ctx, inst, bloomgate.FollowConfig{Identity: id, Snapshots: inst.Snapshots()})
//
// Follow loads the newest snapshot the feeder uploaded, then Stream replays
// the log from the snapshot's cursor. It needs no database access.
// Guarantees:
//
//   - Nothing skipped, nothing foreign applied: Stream applies a batch only
//     if it decodes, carries a valid MAC when the set has a Key, continues
//     from the position applied (fanout.Continue), has a term no older
//     than the batch before it and no newer than the feeder's heartbeat,
//     and ends at or before the heartbeat's database head. Anything else —
//     a trimmed log, a lost or damaged entry, someone else's message, a
//     feeder that started a new history — is an error wrapping ErrGap
//     (and changefeed.ErrRebuild): Follow fails open and starts again from
//     the newest snapshot.
//
//   - Bounded staleness: Head is the feeder's heartbeat (the database's
//     newest position), so the gate is ready only once it has applied what
//     was committed before it started, and fails open when it falls more
//     than MaxLag behind, or when the heartbeat stops (see HeadTimeout).
//
//   - Follows the feeder's rebuilds: each snapshot record carries the
//     generation of its filter (one more with every bootstrap or rebuild of
//     the feeder's gate). A running Stream reads the record every half
//     second (Head reads it too); when it is of a newer generation, Follow
//     (through changefeed.Generations: Newer, LoadNewer, CatchUp, Swapped)
//     loads it while the old filter serves, catches it up from the log to
//     the old one's position and swaps it in there, never failing open:
//     an instance's false-positive rate follows the feeder's while it
//     runs, without a restart. A caller that never asks for Newer sees the
//     Stream end instead, and reloads.
//
// Bootstrap and Rebuild return ErrSnapshotOnly, and SnapshotOnly reports
// true, so Follow never starts a rebuild: instances never scan the
// database; their rebuilds are the feeder's. Confirm does nothing. An
// Instance is safe for concurrent use.
type Instance struct {
	b   Backend
	cfg InstanceConfig

	mu        sync.Mutex
	marks     map[changefeed.Position]start // snapshot and batch ends
	oldMarks  map[changefeed.Position]start // the marks before, while marks fills
	checked   time.Time                     // when checkFilter last read the record
	hb        beatValue
	hbChanged time.Time               // when hb.Beat last changed
	seen      pollID                  // the newest read of the database's head seen
	seenRead  time.Time               // the start of the latest heartbeat read that showed seen
	olderRead time.Time               // the start of the latest one that showed an older read
	head      polledHead              // what Head and HeadAge report
	skipLocal bool                    // the local snapshot led to a gap
	loadErr   error                   // why the last Load found nothing usable
	gen       uint64                  // the generation of the filter served
	restart   context.CancelCauseFunc // ends the running Stream
	// Swaps beside the stream (changefeed.Generations): swaps is set once
	// Follow asks for Newer; newer signals a newer record; next is where
	// the catch-up of the generation LoadNewer loaded reads from.
	swaps    bool
	newer    chan struct{}
	signaled uint64 // the newest generation signalled (logged once)
	next     start
	nextPos  changefeed.Position
	hasNext  bool
}

// pollID names one read of the database's head by a feeder.
type pollID struct{ term, poll uint64 }

func (a pollID) after(b pollID) bool {
	return a.term > b.term || a.term == b.term && a.poll > b.poll
}

// polledHead is a database head read by the feeder, and a time at or
// before that read, by this process's clock.
type polledHead struct {
	pos changefeed.Position
	at  time.Time
	ok  bool
}

// firstSnapshotWait bounds how long Bootstrap waits for a set's first
// snapshot record.
const firstSnapshotWait = 30 * time.Second

// ErrNoPolledHead is returned by Head while no heartbeat has shown this
// instance a database head read by a feeder in its term (at its start,
// after a feeder's takeover, or from a feeder of an earlier version).
var ErrNoPolledHead = errors.New("fanout: no heartbeat yet with a database head the feeder read in its term")

// filterCheckEvery is how often a running Stream reads the snapshot record
// for a newer filter of the feeder's: until it does, an instance serves the
// old filter while the table grows (at 18 k rows/s, half a second was 9 k
// keys past a 75 k-key filter: twice the target rate); a read of one small
// key ten times a second costs the store little.
const filterCheckEvery = 100 * time.Millisecond

// errNewFilter ends a Stream when the feeder has recorded a snapshot of a
// newer filter (it rebuilt or bootstrapped): Follow loads it.
var errNewFilter = errors.New("fanout: the feeder recorded a snapshot of a newer filter; loading it")

// start is where a Stream from a position reads: after cur, with the term
// of the batch before it.
type start struct {
	cur   Cursor
	term  uint64
	gen   uint64
	local bool
}

var (
	_ changefeed.Feed        = (*Instance)(nil)
	_ changefeed.RelayedHead = (*Instance)(nil)
	_ changefeed.Generations = (*Instance)(nil)
)

// NewInstance returns the instance side of the set b describes. Adapters
// call it (jetstream.Set.NewInstance, redisstream.Set.NewInstance).
func NewInstance(b Backend, cfg InstanceConfig) (*Instance, error) {
	if err := b.check(false); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.HeadTimeout < 0 {
		return nil, fmt.Errorf("%w: negative HeadTimeout", ErrInvalidConfig)
	}
	defaults.Set(&cfg.HeadTimeout, DefaultHeadTimeout)
	return &Instance{b: b, cfg: cfg, marks: map[changefeed.Position]start{}, newer: make(chan struct{}, 1)}, nil
}

// Snapshots returns the store for FollowConfig.Snapshots: Load tries the
// newest local snapshot if it is at least as new as the feeder's newest,
// then the feeder's, newest first, then the older local ones; Save writes
// to InstanceConfig.Local, and does nothing without one (only the feeder
// uploads).
func (in *Instance) Snapshots() changefeed.SnapshotStore {
	return &instanceSnapshots{in: in, ss: snapshots{b: &in.b, local: in.cfg.Local, loaded: in.loaded, cursorOf: in.cursorOf}}
}

// instanceSnapshots skips the local store after it led to a gap.
type instanceSnapshots struct {
	in *Instance
	ss snapshots
}

func (s *instanceSnapshots) Save(ctx context.Context, pos changefeed.Position, write func(w io.Writer) error) error {
	return s.ss.Save(ctx, pos, write)
}

func (s *instanceSnapshots) Load(ctx context.Context, try func(r io.Reader) error) error {
	s.in.firstLook(ctx)
	ss := s.ss
	s.in.mu.Lock()
	if s.in.skipLocal {
		ss.local = nil
	}
	s.in.mu.Unlock()
	err := ss.Load(ctx, try)
	s.in.mu.Lock()
	s.in.loadErr = err
	s.in.mu.Unlock()
	return err
}

func (in *Instance) loaded(pos changefeed.Position, cur Cursor, term, gen uint64, local bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	clear(in.marks)
	in.oldMarks = nil
	in.marks[pos] = start{cur, term, gen, local}
	in.gen = gen
}

// markOf returns the start after pos. in.mu is held.
func (in *Instance) markOf(pos changefeed.Position) (start, bool) {
	if s, ok := in.marks[pos]; ok {
		return s, true
	}
	s, ok := in.oldMarks[pos]
	return s, ok
}

func (in *Instance) cursorOf(pos changefeed.Position) (Cursor, uint64, uint64, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	s, ok := in.markOf(pos)
	return s.cur, s.term, in.gen, ok
}

// SnapshotOnly reports true: Gate.Follow never starts a rebuild of its own
// from an instance (Rebuild always fails); the instance's new filters are
// the feeder's, loaded when the feeder records one.
func (in *Instance) SnapshotOnly() bool { return true }

// Bootstrap returns ErrSnapshotOnly, with why the last Load found no
// usable snapshot (none yet, or refused ones: another Key, damage), so that
// the gate's reason says it.
func (in *Instance) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	// Nothing recorded yet (a set's first start): wait here for the
	// feeder's first snapshot, so that Follow loads it at once instead of
	// failing again and again with a growing backoff.
	deadline := time.Now().Add(firstSnapshotWait)
	for time.Now().Before(deadline) {
		if _, _, err := in.b.Store.Get(ctx, keySnapshot); !errors.Is(err, ErrNotFound) {
			break
		}
		if backoff.Sleep(ctx, 20*time.Millisecond) != nil {
			break
		}
	}
	in.mu.Lock()
	why := in.loadErr
	in.mu.Unlock()
	if why != nil {
		return 0, fmt.Errorf("%w: %w", ErrSnapshotOnly, why)
	}
	return 0, ErrSnapshotOnly
}

// Rebuild returns ErrSnapshotOnly.
func (in *Instance) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return 0, ErrSnapshotOnly
}

// Stream applies the log's transactions after from (a snapshot's position)
// until ctx is done, apply fails, or a gap (an error wrapping ErrGap).
func (in *Instance) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	in.mu.Lock()
	st, ok := in.markOf(from)
	in.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: no log cursor known for position %v", ErrGap, from)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	in.mu.Lock()
	in.restart = cancel
	in.mu.Unlock()
	// The snapshot record is watched here, not only by Head: a caller may
	// take the database's head from elsewhere (serve does, where it can
	// read the database) and never call this Head.
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel(nil)
	watch.Go(func() {
		t := time.NewTicker(filterCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				in.checkFilter(sctx)
			}
		}
	})
	err := in.read(sctx, st, from, apply, true)
	if ctx.Err() == nil && errors.Is(context.Cause(sctx), errNewFilter) {
		return errNewFilter
	}
	if errors.Is(err, ErrGap) && st.local {
		in.mu.Lock()
		in.skipLocal = true
		in.mu.Unlock()
	}
	return err
}

// read applies the log's transactions after from, read after st's cursor,
// checking each batch (decoding, MAC, term, heartbeat cover, continuity),
// until ctx is done, apply fails or a gap. With marks, it remembers each
// position's cursor (the running Stream's, for local snapshots).
func (in *Instance) read(ctx context.Context, st start, from changefeed.Position, apply func(changefeed.Txn) error, marks bool) error {
	pos, term, prev := from, st.term, st.cur
	mark := func(pos changefeed.Position, s start) {
		if marks {
			in.mark(pos, s)
		}
	}
	return in.b.Log.Read(ctx, st.cur, func(e Entry) error {
		b, err := DecodeBatch(e.Data, in.b.Key)
		if err != nil {
			return fmt.Errorf("%w: entry %s: %w", ErrGap, e.Cursor, err)
		}
		if b.Term < term {
			return fmt.Errorf("%w: entry %s has term %d, older than %d before it (a stale feeder's, or not the feeder's)", ErrGap, e.Cursor, b.Term, term)
		}
		if err := in.vouch(ctx, b, e.Cursor); err != nil {
			return err
		}
		txns, err := Continue(pos, b)
		if err != nil {
			return fmt.Errorf("%w: entry %s: %w", ErrGap, e.Cursor, err)
		}
		for i, t := range txns {
			// Marked before apply: a snapshot of the gate at t.End may be
			// saved (beside the stream) as soon as apply returns.
			if i < len(txns)-1 {
				mark(t.End, start{prev, term, 0, false})
			} else {
				mark(t.End, start{e.Cursor, b.Term, 0, false})
			}
			if err := apply(t); err != nil {
				return err
			}
			pos = t.End
		}
		term, prev = b.Term, e.Cursor
		mark(b.End(), start{e.Cursor, b.Term, 0, false})
		return nil
	})
}

// Newer implements changefeed.Generations: it receives when the newest
// snapshot record is of a newer filter than the one served. Once Follow has
// asked for it, a newer record no longer ends the Stream: Follow swaps the
// newer filter in beside it.
func (in *Instance) Newer() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.swaps = true
	return in.newer
}

// LoadNewer implements changefeed.Generations: it calls try with the
// feeder's newest snapshot if its generation is newer than the one served,
// and remembers where the log continues after it, for CatchUp.
func (in *Instance) LoadNewer(ctx context.Context, try func(r io.Reader) error) (uint64, error) {
	ss := snapshots{b: &in.b}
	recs, _, err := ss.records(ctx)
	if err != nil {
		return 0, err
	}
	in.mu.Lock()
	served := in.gen
	in.mu.Unlock()
	if len(recs) == 0 || recs[0].Gen <= served {
		return 0, nil
	}
	r := recs[0]
	if err := ss.loadRecord(ctx, r, try); err != nil {
		return r.Gen, fmt.Errorf("%s: %w", r.Object, err)
	}
	in.mu.Lock()
	in.next, in.nextPos, in.hasNext = start{r.Cursor, r.Term, r.Gen, false}, r.Position, true
	in.mu.Unlock()
	return r.Gen, nil
}

// CatchUp implements changefeed.Generations: it applies the log after from,
// the position of the snapshot LoadNewer loaded, with every check Stream
// makes, beside the running Stream.
func (in *Instance) CatchUp(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	in.mu.Lock()
	st, ok := in.next, in.hasNext && in.nextPos == from
	in.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: no log cursor known for the newer snapshot at %v", ErrGap, from)
	}
	return in.read(ctx, st, from, apply, false)
}

// Swapped implements changefeed.Generations: generation gen serves from pos
// on.
func (in *Instance) Swapped(pos changefeed.Position, gen uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.gen = max(in.gen, gen)
	in.hasNext = false
}

// Generation returns the feeder's generation of the filter served.
func (in *Instance) Generation() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.gen
}

// mark remembers where to read after pos (for a local snapshot taken
// there), keeping the last 32 Ki to 64 Ki marks: a snapshot encoded at a
// position is saved while the stream goes on, and must still find it.
func (in *Instance) mark(pos changefeed.Position, s start) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.marks) >= 1<<15 {
		in.oldMarks, in.marks = in.marks, make(map[changefeed.Position]start, 1<<15)
	}
	in.marks[pos] = s
}

// vouch holds b until a heartbeat of the feeder covers it — a term at
// least b's and a database head at least b's end — for up to HeadTimeout;
// then b is a gap: no feeder wrote it.
func (in *Instance) vouch(ctx context.Context, b Batch, cur Cursor) error {
	in.mu.Lock()
	hb := in.hb
	in.mu.Unlock()
	if b.Term <= hb.Term && b.End() <= hb.Head {
		return nil
	}
	deadline := time.Now().Add(in.cfg.HeadTimeout)
	wait := headWaitStart
	for {
		h, err := in.heartbeat(ctx)
		if err == nil && b.Term <= h.Term && b.End() <= h.Head {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%w: entry %s: no heartbeat covers it: %w", ErrGap, cur, err)
			}
			return fmt.Errorf("%w: entry %s (term %d, end %v) is beyond the feeder's heartbeat (term %d, database head %v)",
				ErrGap, cur, b.Term, b.End(), h.Term, h.Head)
		}
		backoff.Sleep(ctx, wait)
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// heartbeat reads the feeder's heartbeat and remembers it.
//
// The freshness it derives keeps internal/freshness's invariant across two
// processes without comparing their clocks. A heartbeat carries the
// feeder's read n of the database's head (Polled, numbered Poll within the
// term) and Gap: how long after its first successful heartbeat write of
// read n−1 read n began. A heartbeat read of ours that began at s and
// showed a read older than n−1 proves that no write of read n−1 was visible
// then, so the feeder's first successful one completed after s, and read n
// began after s + Gap. The first read of a term, a heartbeat whose Gap is
// unknown, and a read with no such earlier heartbeat read of ours (the
// first one an instance sees) give no bound and are not used; a read that
// is not newer (a replay, an older term, a heartbeat without a read) is
// never used.
func (in *Instance) heartbeat(ctx context.Context) (beatValue, error) {
	start := time.Now()
	v, _, err := in.b.Store.Get(ctx, keyHead)
	if err != nil {
		return beatValue{}, fmt.Errorf("fanout: heartbeat: %w", err)
	}
	h, err := decodeHeartbeat(v, in.b.Key)
	if err != nil {
		return beatValue{}, fmt.Errorf("fanout: heartbeat: %w", err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if h.Beat != in.hb.Beat || in.hbChanged.IsZero() {
		in.hbChanged = time.Now()
	}
	if h.Term >= in.hb.Term {
		in.hb = h
	}
	id := pollID{h.Term, h.Poll}
	switch {
	case id.after(in.seen):
		// The latest read of ours that showed a read older than the
		// feeder's previous one.
		var before time.Time
		if prev := (pollID{h.Term, h.Poll - 1}); h.Poll < 2 {
		} else if in.seen == prev {
			before = in.olderRead
		} else if prev.after(in.seen) {
			before = latest(in.olderRead, in.seenRead)
		}
		if h.Gap >= 0 && !before.IsZero() {
			in.head = polledHead{pos: h.Polled, at: before.Add(h.Gap), ok: true}
		}
		in.olderRead = latest(in.olderRead, in.seenRead)
		in.seen, in.seenRead = id, start
	case id == in.seen:
		in.seenRead = latest(in.seenRead, start)
	default:
		in.olderRead = latest(in.olderRead, start)
	}
	return h, nil
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Head returns the newest database head a feeder read, as HeadAge does.
func (in *Instance) Head(ctx context.Context) (changefeed.Position, error) {
	pos, _, err := in.HeadAge(ctx)
	return pos, err
}

// HeadAge implements bloomgate.RelayedHead: the newest database head a
// feeder read in its term, and how long ago at least it read it. It
// returns ErrStaleHead when the heartbeat has not changed for HeadTimeout
// (no feeder is running), and ErrNoPolledHead until a heartbeat shows a
// head read after this instance's first look (see heartbeat). Either way
// the gate stops counting itself fresher, and fails open once MaxLag has
// passed since the head it last passed was read.
func (in *Instance) HeadAge(ctx context.Context) (changefeed.Position, time.Duration, error) {
	if _, err := in.heartbeat(ctx); err != nil {
		return 0, 0, err
	}
	in.checkFilter(ctx)
	in.mu.Lock()
	age := time.Since(in.hbChanged)
	head, term := in.head, in.hb.Term
	in.mu.Unlock()
	if age > in.cfg.HeadTimeout {
		return 0, 0, fmt.Errorf("%w: unchanged for %v", ErrStaleHead, age.Round(time.Millisecond))
	}
	if !head.ok {
		return 0, 0, fmt.Errorf("%w (term %d)", ErrNoPolledHead, term)
	}
	return head.pos, max(time.Since(head.at), 0), nil
}

// firstLook, while this instance has no head whose age it can bound (see
// heartbeat), reads the heartbeat: a starting instance can bound the age
// only of a head the feeder read two reads after its first look, so the
// look is taken before the snapshot is loaded, and the feeder's reads
// during the load count.
func (in *Instance) firstLook(ctx context.Context) {
	in.mu.Lock()
	ok := in.head.ok
	in.mu.Unlock()
	if !ok {
		in.heartbeat(ctx) // errors are HeadAge's to report
	}
}

// checkFilter ends the running Stream when the newest snapshot record is
// of a newer filter than the one loaded, so that Follow loads it: running
// instances follow the feeder's rebuilds (an overfilled filter, say).
func (in *Instance) checkFilter(ctx context.Context) {
	in.mu.Lock()
	if in.restart == nil || time.Since(in.checked) < filterCheckEvery/2 {
		in.mu.Unlock()
		return // no Stream to end, or Head and Stream's watch both ask
	}
	in.checked = time.Now()
	in.mu.Unlock()
	v, _, err := in.b.Store.Get(ctx, keySnapshot)
	if err != nil {
		return
	}
	r, err := decodeRecord(v, in.b.Key)
	if err != nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case r.Gen <= in.gen:
	case in.swaps:
		if r.Gen > in.signaled {
			in.signaled = r.Gen
			in.b.Logger.Info("bloomgate: fan-out instance swaps in the feeder's newer filter", "set", in.b.Name, "generation", r.Gen, "position", r.Position)
		}
		select {
		case in.newer <- struct{}{}:
		default:
		}
	case in.restart != nil:
		in.b.Logger.Info("bloomgate: fan-out instance loads the feeder's newer filter", "set", in.b.Name, "generation", r.Gen, "position", r.Position)
		in.restart(errNewFilter)
		in.restart = nil
	}
}

// Confirm does nothing: the log keeps its entries for its own retention.
func (in *Instance) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }
