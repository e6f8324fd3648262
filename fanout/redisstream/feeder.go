package redisstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// FeederConfig configures a Feeder. The zero value of every field but
// Source and Gate means its default.
type FeederConfig struct {
	// Source is the database's change feed, such as source/postgres.Feed.
	// Required. Only the lease holder uses it.
	Source bloomgate.Feed
	// Gate is the feeder's own gate: it follows Source and its snapshots
	// are the ones instances start from. Required.
	Gate *bloomgate.Gate
	// Follow configures the gate's Follow (Identity, SnapshotInterval,
	// MaxLag). Snapshots must be nil: the feeder sets it.
	Follow bloomgate.FollowConfig
	// ID names this feeder in the lease. Default: host name, process id and
	// the start time.
	ID string
	// HeartbeatInterval is how often the lease holder writes the database's
	// newest position to the head key. Default: 1 s.
	HeartbeatInterval time.Duration
	// MaxBatch bounds the transactions per entry. Default: 256.
	MaxBatch int
}

// Defaults of FeederConfig's fields.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultMaxBatch          = 256
)

// Feeder is the one process per set that follows the database: whichever
// Feeder holds the lease runs Gate.Follow over Source, appending every
// transaction (progress markers included) to the stream before the gate
// applies it, and confirming it to Source only after the append (and WAIT,
// with Config.WaitReplicas) succeeded. The append script adds an entry only
// when the stream's top is the one the feeder last appended (ErrFenced
// otherwise), and entry IDs are the batches' end positions, so neither a
// stale feeder nor a restarted one adds anything twice. A new lease holder
// starts from the newest snapshot, replays the stream's tail into its gate
// and continues Source from the stream's top. Run blocks; a Feeder is safe
// for concurrent use.
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
	case cfg.HeartbeatInterval < 0 || cfg.MaxBatch < 0:
		return nil, fmt.Errorf("%w: negative HeartbeatInterval or MaxBatch", ErrInvalidConfig)
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())
	}
	defaults.Set(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	defaults.Set(&cfg.MaxBatch, DefaultMaxBatch)
	return &Feeder{s: s, cfg: cfg}, nil
}

var (
	renew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)
	release = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	// appendBatch adds an entry only if the stream's top is ARGV[1].
	appendBatch = redis.NewScript(`
local top = redis.call('GET', KEYS[2]) or '0-0'
if top == ARGV[2] then
  -- Our earlier attempt: write again, so a WAIT after it covers it.
  redis.call('SET', KEYS[2], ARGV[2])
  return 'DUP'
end
if top ~= ARGV[1] then return redis.error_reply('BGFENCED stream top is ' .. top) end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], ARGV[2], 'd', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2])
return 'OK'`)
)

// Run competes for the lease and, while it holds it, follows Source and
// publishes. It returns ctx's error when ctx is done (releasing the lease),
// or bloomgate.ErrClosed when the gate is closed.
func (f *Feeder) Run(ctx context.Context) error {
	log := f.s.cfg.Logger
	for {
		if err := f.acquire(ctx); err != nil {
			return err
		}
		log.Info("bloomgate: feeder lease acquired", "set", f.s.cfg.Set, "id", f.cfg.ID)
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { f.hold(lctx, cancel) })
		wg.Go(func() { f.heartbeat(lctx) })
		fcfg := f.cfg.Follow
		fcfg.Snapshots = &snapshots{s: f.s, writable: true}
		err := f.cfg.Gate.Follow(lctx, &appendingFeed{f: f}, fcfg)
		cancel()
		wg.Wait()
		rctx, rcancel := context.WithTimeout(context.Background(), f.s.cfg.LeaseTTL)
		release.Run(rctx, f.s.cfg.Client, []string{f.s.lease}, f.cfg.ID)
		rcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, bloomgate.ErrClosed) {
			return err
		}
		log.Warn("bloomgate: feeder lease lost", "set", f.s.cfg.Set, "id", f.cfg.ID)
	}
}

func (f *Feeder) acquire(ctx context.Context) error {
	every := max(f.s.cfg.LeaseTTL/8, 20*time.Millisecond)
	for {
		ok, err := f.s.cfg.Client.SetNX(ctx, f.s.lease, f.cfg.ID, f.s.cfg.LeaseTTL).Result()
		if err == nil && ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			f.s.cfg.Logger.Warn("bloomgate: feeder lease", "err", err)
		}
		if err := backoff.Sleep(ctx, every); err != nil {
			return err
		}
	}
}

// hold renews the lease until ctx is done or it is lost (then it calls
// lost): taken by another holder, or not renewed for 3/4 of LeaseTTL.
func (f *Feeder) hold(ctx context.Context, lost func()) {
	ttl := f.s.cfg.LeaseTTL
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
		n, err := renew.Run(rctx, f.s.cfg.Client, []string{f.s.lease}, f.cfg.ID, ttl.Milliseconds()).Int()
		cancel()
		switch {
		case err == nil && n == 1:
			renewed = time.Now()
		case ctx.Err() != nil:
			return
		case err == nil:
			f.s.cfg.Logger.Warn("bloomgate: feeder lease taken over")
			lost()
			return
		case time.Since(renewed) > ttl*3/4:
			f.s.cfg.Logger.Warn("bloomgate: feeder lease not renewed in time", "err", err)
			lost()
			return
		}
	}
}

func (f *Feeder) heartbeat(ctx context.Context) {
	t := time.NewTicker(f.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if h, err := f.cfg.Source.Head(ctx); err == nil {
			v := fmt.Sprintf("%d %d", uint64(h), time.Now().UnixNano())
			if err := f.s.cfg.Client.Set(ctx, f.s.head, v, 0).Err(); err != nil && ctx.Err() == nil {
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

// appendingFeed is the bloomgate.Feed the feeder's gate follows during one
// lease: Source, with every transaction appended before it is applied.
type appendingFeed struct{ f *Feeder }

var _ bloomgate.Feed = (*appendingFeed)(nil)

func (af *appendingFeed) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return af.f.cfg.Source.Bootstrap(ctx, fn)
}

func (af *appendingFeed) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return af.f.cfg.Source.Rebuild(ctx, fn)
}

func (af *appendingFeed) Head(ctx context.Context) (changefeed.Position, error) {
	return af.f.cfg.Source.Head(ctx)
}

// Confirm does nothing: Stream confirms to Source once an entry is stored.
func (af *appendingFeed) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }

// Stream replays the stream's tail after from into apply, then follows
// Source from the stream's top, appending each batch before applying it.
func (af *appendingFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	s := af.f.s
	top, err := s.tail(ctx)
	if err != nil {
		return err
	}
	pos := from
	if from < top {
		if pos, err = s.read(ctx, from, top, apply); err != nil {
			return err
		}
		if pos != top {
			return fmt.Errorf("%w: replay reached %v, the stream's top is %v", fanout.ErrGap, pos, top)
		}
	}
	q := make(chan changefeed.Txn, af.f.cfg.MaxBatch)
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var pubErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		pubErr = af.appendLoop(sctx, q, pos, top, apply)
		cancel(pubErr)
	}()
	err = af.f.cfg.Source.Stream(sctx, pos, func(t changefeed.Txn) error {
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

// appendLoop appends what q holds in batches after the entry top, then
// applies and confirms each batch.
func (af *appendingFeed) appendLoop(ctx context.Context, q <-chan changefeed.Txn, prev, top changefeed.Position, apply func(changefeed.Txn) error) error {
	s := af.f.s
	expect := "0-0"
	if top > 0 {
		expect = entryID(top)
	}
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
		for len(batch) < af.f.cfg.MaxBatch {
			select {
			case t := <-q:
				batch = append(batch, t)
			default:
				break drain
			}
		}
		var err error
		if buf, err = fanout.AppendBatch(buf[:0], fanout.Batch{Prev: prev, Txns: batch}); err != nil {
			return err
		}
		end := batch[len(batch)-1].End
		id := entryID(end)
		if err := af.append(ctx, expect, id, buf); err != nil {
			return err
		}
		expect, prev = id, end
		for _, t := range batch {
			if err := apply(t); err != nil {
				return err
			}
		}
		if err := af.f.cfg.Source.Confirm(ctx, end); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("bloomgate: feeder confirm", "err", err)
		}
	}
}

// append runs the append script, retrying failed attempts until ctx is
// done (the script recognises an earlier attempt that succeeded). With
// WaitReplicas it then waits for the replicas.
func (af *appendingFeed) append(ctx context.Context, expect, id string, data []byte) error {
	s := af.f.s
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		var err error
		var wait *redis.Cmd
		if s.cfg.WaitReplicas == 0 {
			err = appendBatch.Run(ctx, s.cfg.Client, []string{s.log, s.top}, expect, id, data, s.cfg.MaxLen).Err()
		} else {
			// WAIT counts the writes of its own connection: one pipeline.
			var cmds []redis.Cmder
			cmds, err = s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
				appendBatch.Eval(ctx, p, []string{s.log, s.top}, expect, id, data, s.cfg.MaxLen)
				wait = p.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
				return nil
			})
			if len(cmds) > 0 {
				err = cmds[0].Err()
			}
		}
		if err != nil && strings.HasPrefix(err.Error(), "BGFENCED") {
			return fmt.Errorf("%w: %v", ErrFenced, err)
		}
		if err == nil && wait != nil {
			var n int64
			n, err = wait.Int64()
			if err == nil && n < int64(s.cfg.WaitReplicas) {
				err = fmt.Errorf("redisstream: WAIT: %d of %d replicas", n, s.cfg.WaitReplicas)
			}
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.cfg.Logger.Warn("bloomgate: feeder append failed, retrying", "id", id, "err", err)
		if err := retry.Wait(ctx); err != nil {
			return err
		}
	}
}
