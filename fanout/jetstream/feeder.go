package jetstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// ErrFenced reports a publish the stream refused because another feeder
// appended since (expected-last-sequence); the feeder starts its run over
// from the stream's tail.
var ErrFenced = errors.New("jetstream: another feeder published (fenced)")

// FeederConfig configures a Feeder. The zero value of every field but
// Source and Gate means its default.
type FeederConfig struct {
	// Source is the database's change feed, such as source/postgres.Feed.
	// Required. Only the lease holder uses it.
	Source bloomgate.Feed
	// Gate is the feeder's own gate: it follows Source (its Config.Source
	// sizes bootstraps) and its snapshots are the ones instances start from.
	// Required; it may serve lookups too.
	Gate *bloomgate.Gate
	// Follow configures the gate's Follow: Identity (instances must use the
	// same), SnapshotInterval (how often a snapshot is uploaded), MaxLag.
	// Snapshots must be nil: the feeder sets it.
	Follow bloomgate.FollowConfig
	// ID names this feeder in the lease. Default: host name, process id and
	// the start time.
	ID string
	// HeartbeatInterval is how often the lease holder writes the database's
	// newest position to the "head" key. Default: 1 s.
	HeartbeatInterval time.Duration
	// MaxBatch bounds the transactions per message. Default: 256.
	MaxBatch int
	// PublishTimeout bounds one publish attempt; failed attempts are
	// retried (the stream drops duplicates) until the run ends. Default: 5 s.
	PublishTimeout time.Duration
}

// Defaults of FeederConfig's fields.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultMaxBatch          = 256
	DefaultPublishTimeout    = 5 * time.Second
)

// Feeder is the one process per set that follows the database: whichever
// Feeder holds the lease runs Gate.Follow over Source, publishing every
// transaction (progress markers included) before the gate applies it and
// confirming it to Source only after the stream acknowledged it; the gate's
// snapshots are uploaded to the object store with the stream sequence that
// follows them. Guarantees:
//
//   - One publisher: the lease (created only when absent, renewed by
//     revision, expiring after Config.LeaseTTL on the server) picks one
//     feeder; a feeder that could not renew for 3/4 of LeaseTTL stops. The
//     stream's expected-last-sequence refuses a stale feeder that still
//     publishes (ErrFenced), and Nats-Msg-Id (the batch's end position)
//     drops a batch published twice.
//   - Nothing lost: Source only learns a position is consumed once the
//     stream (a quorum of its replicas) holds it. A new lease holder starts
//     from the newest snapshot, replays the stream's tail into its gate and
//     continues Source from the stream's last position; a Source that lost
//     its position (changefeed.ErrRebuild) bootstraps, and the first batch
//     after the bootstrap point makes instances start over from the
//     snapshot uploaded at it.
//
// Run blocks; a Feeder is safe for concurrent use.
type Feeder struct {
	s   *Set
	cfg FeederConfig
}

// NewFeeder returns a feeder for the set.
func (s *Set) NewFeeder(cfg FeederConfig) (*Feeder, error) {
	switch {
	case cfg.Source == nil || cfg.Gate == nil:
		return nil, fmt.Errorf("%w: Source and Gate are required", ErrInvalidConfig)
	case cfg.Follow.Snapshots != nil:
		return nil, fmt.Errorf("%w: Follow.Snapshots is set by the feeder", ErrInvalidConfig)
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
	return &Feeder{s: s, cfg: cfg}, nil
}

// Run competes for the lease and, while it holds it, follows Source and
// publishes. It returns ctx's error when ctx is done (releasing the lease),
// or bloomgate.ErrClosed when the gate is closed.
func (f *Feeder) Run(ctx context.Context) error {
	log := f.s.cfg.Logger
	for {
		rev, err := f.acquire(ctx)
		if err != nil {
			return err
		}
		log.Info("bloomgate: feeder lease acquired", "set", f.s.cfg.Set, "id", f.cfg.ID)
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var held uint64
		wg.Go(func() { held = f.hold(lctx, rev, cancel) })
		wg.Go(func() { f.heartbeat(lctx) })
		fcfg := f.cfg.Follow
		pf := &publishingFeed{f: f}
		fcfg.Snapshots = &snapshots{s: f.s, startOf: pf.startOf}
		err = f.cfg.Gate.Follow(lctx, pf, fcfg)
		cancel()
		wg.Wait()
		if held != 0 {
			dctx, dcancel := context.WithTimeout(context.Background(), f.s.cfg.LeaseTTL)
			f.s.lease.Delete(dctx, keyFeeder, js.LastRevision(held))
			dcancel()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, bloomgate.ErrClosed) {
			return err
		}
		log.Warn("bloomgate: feeder lease lost", "set", f.s.cfg.Set, "id", f.cfg.ID)
	}
}

// acquire waits until it creates the lease key.
func (f *Feeder) acquire(ctx context.Context) (uint64, error) {
	every := max(f.s.cfg.LeaseTTL/8, 20*time.Millisecond)
	for {
		rev, err := f.s.lease.Create(ctx, keyFeeder, []byte(f.cfg.ID))
		if err == nil {
			return rev, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !errors.Is(err, js.ErrKeyExists) {
			f.s.cfg.Logger.Warn("bloomgate: feeder lease", "err", err)
		}
		if err := backoff.Sleep(ctx, every); err != nil {
			return 0, err
		}
	}
}

// hold renews the lease until ctx is done or the lease is lost (then it
// calls lost). It returns the lease's revision if still held, else 0.
func (f *Feeder) hold(ctx context.Context, rev uint64, lost func()) uint64 {
	ttl := f.s.cfg.LeaseTTL
	renewed := time.Now()
	t := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, ttl/4)
		nrev, err := f.s.lease.Update(rctx, keyFeeder, []byte(f.cfg.ID), rev)
		cancel()
		switch {
		case err == nil:
			rev, renewed = nrev, time.Now()
		case ctx.Err() != nil:
			return rev
		case errors.Is(err, js.ErrKeyRevisionMismatch), errors.Is(err, js.ErrKeyExists), errors.Is(err, js.ErrKeyNotFound):
			f.s.cfg.Logger.Warn("bloomgate: feeder lease taken over", "err", err)
			lost()
			return 0
		case time.Since(renewed) > ttl*3/4:
			f.s.cfg.Logger.Warn("bloomgate: feeder lease not renewed in time", "err", err)
			lost()
			return 0
		}
	}
}

// heartbeat writes Source's head to the "head" key regularly.
func (f *Feeder) heartbeat(ctx context.Context) {
	t := time.NewTicker(f.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if h, err := f.cfg.Source.Head(ctx); err == nil {
			if _, err := f.s.pos.Put(ctx, keyHead, binary.BigEndian.AppendUint64(nil, uint64(h))); err != nil && ctx.Err() == nil {
				f.s.cfg.Logger.Warn("bloomgate: feeder heartbeat", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishingFeed is the bloomgate.Feed the feeder's gate follows during one
// lease: Source, with every transaction published before it is applied.
type publishingFeed struct {
	f *Feeder

	mu     sync.Mutex
	starts []posSeq // position → stream sequence after it, increasing
}

type posSeq struct {
	pos changefeed.Position
	seq uint64
}

var _ bloomgate.Feed = (*publishingFeed)(nil)

func (pf *publishingFeed) note(pos changefeed.Position, seq uint64) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if n := len(pf.starts); n > 0 && pf.starts[n-1].pos >= pos {
		pf.starts = pf.starts[:sort.Search(n, func(i int) bool { return pf.starts[i].pos >= pos })]
	}
	if len(pf.starts) >= 1<<20 {
		pf.starts = append(pf.starts[:0], pf.starts[len(pf.starts)/2:]...)
	}
	pf.starts = append(pf.starts, posSeq{pos, seq})
}

// startOf returns the stream sequence to read after pos, and forgets the
// positions before it (snapshots only move forward).
func (pf *publishingFeed) startOf(pos changefeed.Position) (uint64, bool) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	i := sort.Search(len(pf.starts), func(i int) bool { return pf.starts[i].pos >= pos })
	if i == len(pf.starts) || pf.starts[i].pos != pos {
		return 0, false
	}
	seq := pf.starts[i].seq
	pf.starts = pf.starts[i:]
	return seq, true
}

func (pf *publishingFeed) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	seq, _, err := pf.f.s.tail(ctx)
	if err != nil {
		return 0, err
	}
	p, err := pf.f.cfg.Source.Bootstrap(ctx, fn)
	if err != nil {
		return 0, err
	}
	pf.note(p, seq+1)
	return p, nil
}

func (pf *publishingFeed) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return pf.f.cfg.Source.Rebuild(ctx, fn)
}

func (pf *publishingFeed) Head(ctx context.Context) (changefeed.Position, error) {
	return pf.f.cfg.Source.Head(ctx)
}

// Confirm does nothing: Stream confirms to Source once the stream holds a
// transaction.
func (pf *publishingFeed) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }

// Stream replays the stream's tail after from into apply, then follows
// Source from the stream's last position, publishing each batch before
// applying it.
func (pf *publishingFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	s := pf.f.s
	seq, last, err := s.tail(ctx)
	if err != nil {
		return err
	}
	pos := from
	if from < last {
		start, err := s.find(ctx, from)
		if err != nil {
			return err
		}
		pos, err = s.read(ctx, start, from, seq, func(t changefeed.Txn, next uint64) error {
			pf.note(t.End, next)
			return apply(t)
		})
		if err != nil {
			return err
		}
		if pos != last {
			return fmt.Errorf("%w: replay of the stream reached %v, its end is %v", fanout.ErrGap, pos, last)
		}
	} else {
		pf.note(pos, seq+1)
	}
	return pf.follow(ctx, pos, seq, apply)
}

// follow runs Source from pos, publishing after sequence seq.
func (pf *publishingFeed) follow(ctx context.Context, pos changefeed.Position, seq uint64, apply func(changefeed.Txn) error) error {
	q := make(chan changefeed.Txn, pf.f.cfg.MaxBatch)
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var pubErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		pubErr = pf.publishLoop(sctx, q, pos, seq, apply)
		cancel(pubErr)
	}()
	err := pf.f.cfg.Source.Stream(sctx, pos, func(t changefeed.Txn) error {
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

// publishLoop publishes what q holds in batches, then applies and confirms
// each batch.
func (pf *publishingFeed) publishLoop(ctx context.Context, q <-chan changefeed.Txn, prev changefeed.Position, seq uint64, apply func(changefeed.Txn) error) error {
	var buf []byte
	var batch []changefeed.Txn
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return ctx.Err()
		case t := <-q:
			batch = append(batch, t)
		}
	drain:
		for len(batch) < pf.f.cfg.MaxBatch {
			select {
			case t := <-q:
				batch = append(batch, t)
			default:
				break drain
			}
		}
		var err error
		buf, err = fanout.AppendBatch(buf[:0], fanout.Batch{Prev: prev, Txns: batch})
		if err != nil {
			return err
		}
		end := batch[len(batch)-1].End
		nseq, err := pf.publish(ctx, buf, prev, end, seq)
		if err != nil {
			return err
		}
		seq, prev = nseq, end
		if log := pf.f.s.cfg.Logger; log.Enabled(ctx, slog.LevelDebug) {
			log.Debug("bloomgate: feeder published", "seq", seq, "txns", len(batch), "bytes", len(buf),
				"since_commit", time.Since(batch[len(batch)-1].Time), "queued", len(q))
		}
		for i, t := range batch {
			next := seq
			if i == len(batch)-1 {
				next = seq + 1
			}
			pf.note(t.End, next)
			if err := apply(t); err != nil {
				return err
			}
		}
		if err := pf.f.cfg.Source.Confirm(ctx, end); err != nil && ctx.Err() == nil {
			pf.f.s.cfg.Logger.Warn("bloomgate: feeder confirm", "err", err)
		}
	}
}

// publish appends one message after sequence seq, retrying failed attempts
// until ctx is done, and returns its sequence.
func (pf *publishingFeed) publish(ctx context.Context, data []byte, prev, end changefeed.Position, seq uint64) (uint64, error) {
	s := pf.f.s
	m := nats.NewMsg(s.subject)
	m.Data = data
	m.Header.Set("Bg-Lsn", end.String())
	m.Header.Set("Bg-Prev-Lsn", prev.String())
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		pctx, cancel := context.WithTimeout(ctx, pf.f.cfg.PublishTimeout)
		ack, err := s.cfg.JetStream.PublishMsg(pctx, m, js.WithMsgID(strconv.FormatUint(uint64(end), 10)), js.WithExpectLastSequence(seq))
		cancel()
		if err == nil {
			if ack.Sequence != seq+1 {
				// A duplicate of another feeder's message, or of ours that
				// did not follow seq: the stream moved on without us.
				return 0, fmt.Errorf("%w: batch ending %v is sequence %d, expected %d", ErrFenced, end, ack.Sequence, seq+1)
			}
			return ack.Sequence, nil
		}
		var apiErr *js.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == js.JSErrCodeStreamWrongLastSequence {
			return 0, fmt.Errorf("%w: %v", ErrFenced, err)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		s.cfg.Logger.Warn("bloomgate: feeder publish failed, retrying", "end", end, "err", err)
		if err := retry.Wait(ctx); err != nil {
			return 0, err
		}
	}
}
