// Package jetstream fans one change feed out to many gate instances over
// NATS JetStream (server 2.9 or later). It is the only package that imports
// the NATS client.
//
// A set (one table's key column, say) lives in four JetStream assets, all
// created by Open with Config.Replicas replicas:
//
//   - stream BG_<set>, subject bloomgate.<set>: the log. Each message is a
//     fanout.Batch (consecutive transactions, with the position the batch
//     continues from), published with Nats-Msg-Id = its end position (decimal), so a
//     retried or repeated publish is dropped by the stream, and with
//     expected-last-sequence, so a feeder that lost its lease is refused.
//   - KV bucket BG_<set>_lease, key "feeder": the feeder lease, taken by
//     create (compare-and-set on "no key"), renewed by revision, expiring
//     after Config.LeaseTTL on the server's clock.
//   - KV bucket BG_<set>_pos: key "snapshot", the newest snapshot's record
//     {position, first stream sequence after it, object} (moved only
//     forward, by revision), with history; key "head", the feeder's
//     heartbeat: the database's newest position, rewritten every
//     FeederConfig.HeartbeatInterval.
//   - object store BG_<set>_snap: the snapshots, in bloomgate's snapshot
//     format, named by position.
//
// One Feeder per set (any number may run; the lease picks one) follows the
// database and publishes; every instance runs bloomgate.Gate.Follow over an
// Instance and its Snapshots. See Feeder and Instance for their guarantees.
//
// A Set, its Feeders and its Instances are safe for concurrent use.
// docs/design.md tabulates the guarantees and their tests; docs/operations.md
// lists the JetStream settings.
package jetstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Config names a set and says how its JetStream assets are made. The zero
// value of every field but JetStream and Set means its default.
type Config struct {
	// JetStream is the client context, from jetstream.New. Required.
	JetStream js.JetStream
	// Set names the set: 1 to 64 of A-Z, a-z, 0-9, _ and -. Required.
	Set string
	// Replicas is the replica count of the stream, buckets and object
	// store (3 in production). Default: 1.
	Replicas int
	// MaxAge bounds how long the stream keeps a message. It must exceed
	// the feeder's snapshot interval by a margin (3× is a good start): an
	// instance whose position has been trimmed away must start from a newer
	// snapshot. Default: 24 h.
	MaxAge time.Duration
	// Duplicates is the stream's deduplication window. Default: 2 min.
	Duplicates time.Duration
	// LeaseTTL is how long the feeder lease lasts without renewal: the
	// longest a crashed feeder blocks its successor. Default: 10 s.
	LeaseTTL time.Duration
	// Logger receives lease changes, reconnections and failures. Default:
	// discard.
	Logger *slog.Logger
}

// Defaults of Config's fields.
const (
	DefaultReplicas   = 1
	DefaultMaxAge     = 24 * time.Hour
	DefaultDuplicates = 2 * time.Minute
	DefaultLeaseTTL   = 10 * time.Second
)

// ErrInvalidConfig reports a Config, FeederConfig or InstanceConfig that
// cannot be used.
var ErrInvalidConfig = errors.New("jetstream: invalid config")

// Set is an opened set: its stream, buckets and object store. It is safe
// for concurrent use.
type Set struct {
	cfg     Config
	subject string
	stream  js.Stream
	pos     js.KeyValue
	lease   js.KeyValue
	objects js.ObjectStore
	starts  startCache
}

// Open creates the set's stream, buckets and object store, or updates them
// to cfg, and returns the Set.
func Open(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.JetStream == nil || !fanout.ValidSet(cfg.Set) {
		return nil, fmt.Errorf("%w: JetStream is required and Set must be 1-64 of A-Z a-z 0-9 _ -, got %q", ErrInvalidConfig, cfg.Set)
	}
	if cfg.Replicas < 0 || cfg.MaxAge < 0 || cfg.Duplicates < 0 || cfg.LeaseTTL < 0 {
		return nil, fmt.Errorf("%w: negative Replicas or duration", ErrInvalidConfig)
	}
	defaults.Set(&cfg.Replicas, DefaultReplicas)
	defaults.Set(&cfg.MaxAge, DefaultMaxAge)
	defaults.Set(&cfg.Duplicates, DefaultDuplicates)
	defaults.Set(&cfg.LeaseTTL, DefaultLeaseTTL)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{cfg: cfg, subject: "bloomgate." + cfg.Set}
	var err error
	s.stream, err = cfg.JetStream.CreateOrUpdateStream(ctx, js.StreamConfig{
		Name:       streamName(cfg.Set),
		Subjects:   []string{s.subject},
		Storage:    js.FileStorage,
		Replicas:   cfg.Replicas,
		MaxAge:     cfg.MaxAge,
		Duplicates: cfg.Duplicates,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream: %w", err)
	}
	s.pos, err = cfg.JetStream.CreateOrUpdateKeyValue(ctx, js.KeyValueConfig{
		Bucket: "BG_" + cfg.Set + "_pos", History: 8, Replicas: cfg.Replicas, Storage: js.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: position bucket: %w", err)
	}
	s.lease, err = cfg.JetStream.CreateOrUpdateKeyValue(ctx, js.KeyValueConfig{
		Bucket: "BG_" + cfg.Set + "_lease", History: 1, TTL: cfg.LeaseTTL, Replicas: cfg.Replicas, Storage: js.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: lease bucket: %w", err)
	}
	s.objects, err = cfg.JetStream.CreateOrUpdateObjectStore(ctx, js.ObjectStoreConfig{
		Bucket: "BG_" + cfg.Set + "_snap", Replicas: cfg.Replicas, Storage: js.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: object store: %w", err)
	}
	return s, nil
}

// Delete removes the set's stream, buckets and object store, and with them
// every message, position and snapshot. No feeder or instance may use the
// set any more.
func (s *Set) Delete(ctx context.Context) error {
	j := s.cfg.JetStream
	return errors.Join(
		j.DeleteStream(ctx, streamName(s.cfg.Set)),
		j.DeleteKeyValue(ctx, "BG_"+s.cfg.Set+"_pos"),
		j.DeleteKeyValue(ctx, "BG_"+s.cfg.Set+"_lease"),
		j.DeleteObjectStore(ctx, "BG_"+s.cfg.Set+"_snap"),
	)
}

func streamName(set string) string { return "BG_" + set }

// startCache maps feed positions to the stream sequence to read next from
// them, for positions seen recently (snapshot records, message ends), so
// Stream rarely has to search the stream.
type startCache struct {
	mu sync.Mutex
	m  map[changefeed.Position]uint64
}

func (c *startCache) put(pos changefeed.Position, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 4096 {
		c.m = make(map[changefeed.Position]uint64)
	}
	c.m[pos] = seq
}

func (c *startCache) get(pos changefeed.Position) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq, ok := c.m[pos]
	return seq, ok
}

// batchAt reads and decodes the message at seq.
func (s *Set) batchAt(ctx context.Context, seq uint64) (fanout.Batch, error) {
	m, err := s.stream.GetMsg(ctx, seq)
	if err != nil {
		return fanout.Batch{}, fmt.Errorf("jetstream: message %d: %w", seq, err)
	}
	return fanout.DecodeBatch(m.Data)
}

// tail returns the stream's last sequence and the end position of its last
// message (0 when the stream holds no message).
func (s *Set) tail(ctx context.Context) (uint64, changefeed.Position, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream: stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return info.State.LastSeq, 0, nil
	}
	b, err := s.batchAt(ctx, info.State.LastSeq)
	if err != nil {
		return 0, 0, err
	}
	return info.State.LastSeq, b.End(), nil
}

// find returns the stream sequence to read from to continue from pos: the
// cached one, else the first message ending after pos, found by binary
// search (positions grow with sequences). A pos beyond the log's end or
// before its first message is an error wrapping fanout.ErrGap.
func (s *Set) find(ctx context.Context, pos changefeed.Position) (uint64, error) {
	if seq, ok := s.starts.get(pos); ok {
		return seq, nil
	}
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream info: %w", err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		return 0, fmt.Errorf("%w: position %v: the stream is empty", fanout.ErrGap, pos)
	}
	lo, hi := first, last+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		b, err := s.batchAt(ctx, mid)
		if err != nil {
			return 0, err
		}
		if b.End() >= pos {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo > last {
		return 0, fmt.Errorf("%w: position %v is beyond the stream's end", fanout.ErrGap, pos)
	}
	b, err := s.batchAt(ctx, lo)
	if err != nil {
		return 0, err
	}
	if b.End() == pos {
		return lo + 1, nil
	}
	if b.Prev > pos {
		return 0, fmt.Errorf("%w: position %v precedes the stream's first message (%v)", fanout.ErrGap, pos, b.Prev)
	}
	return lo, nil
}

// read applies the stream's messages from sequence start on, continuing
// from pos (fanout.Continue), and returns the position reached. apply gets
// each transaction and the sequence to resume from after it. It checks that
// sequences follow each other: a trimmed or missing message is an error
// wrapping fanout.ErrGap. It returns after the message at until (when
// until > 0), or when ctx is done, apply fails, or a message is corrupt.
func (s *Set) read(ctx context.Context, start uint64, pos changefeed.Position, until uint64,
	apply func(t changefeed.Txn, next uint64) error) (changefeed.Position, error) {
	next := start
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		if until > 0 && next > until {
			return pos, nil
		}
		var err error
		pos, err = s.readFrom(ctx, &next, pos, until, apply)
		if err == nil || ctx.Err() != nil || errors.Is(err, changefeed.ErrRebuild) || errors.Is(err, fanout.ErrCorrupt) || errors.Is(err, errApply) {
			if ctx.Err() != nil {
				return pos, ctx.Err()
			}
			return pos, err
		}
		s.cfg.Logger.Warn("bloomgate: jetstream consumer failed, recreating", "seq", next, "err", err)
		if err := retry.Wait(ctx); err != nil {
			return pos, err
		}
	}
}

var errApply = errors.New("jetstream: apply failed")

// readFrom runs one ephemeral consumer (R1, in memory, no acks) from
// *next. The consumer's idle heartbeats reveal a consumer lost with its
// server; read then creates another one. (The client's ordered consumer
// retries its re-creation forever, inside Next, which kept an instance
// stuck when a server went away.)
func (s *Set) readFrom(ctx context.Context, next *uint64, pos changefeed.Position, until uint64,
	apply func(t changefeed.Txn, next uint64) error) (changefeed.Position, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	cons, err := s.stream.CreateConsumer(cctx, js.ConsumerConfig{
		DeliverPolicy:     js.DeliverByStartSequencePolicy,
		OptStartSeq:       *next,
		AckPolicy:         js.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	cancel()
	if err != nil {
		return pos, fmt.Errorf("jetstream: consumer: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
		cancel()
	}()
	it, err := cons.Messages(js.PullExpiry(5*time.Second), js.PullHeartbeat(time.Second))
	if err != nil {
		return pos, fmt.Errorf("jetstream: consumer: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer func() {
		if stop() {
			it.Stop()
		}
	}()
	for {
		m, err := it.Next()
		if err != nil {
			return pos, fmt.Errorf("jetstream: next message: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return pos, fmt.Errorf("jetstream: message metadata: %w", err)
		}
		seq := md.Sequence.Stream
		if seq < *next {
			continue // redelivered after a consumer reset
		}
		if seq > *next {
			return pos, s.skipped(ctx, *next, seq)
		}
		b, err := fanout.DecodeBatch(m.Data())
		if err != nil {
			return pos, fmt.Errorf("jetstream: message %d: %w", seq, err)
		}
		txns, err := fanout.Continue(pos, b)
		if err != nil {
			return pos, fmt.Errorf("jetstream: message %d: %w", seq, err)
		}
		for i, t := range txns {
			resume := seq
			if i == len(txns)-1 {
				resume = seq + 1
			}
			if err := apply(t, resume); err != nil {
				return pos, fmt.Errorf("%w: %w", errApply, err)
			}
			pos = t.End
		}
		*next = seq + 1
		s.starts.put(b.End(), seq+1)
		if until > 0 && seq >= until {
			return pos, nil
		}
	}
}

// skipped explains a consumer that delivered got where want was due: an
// error wrapping fanout.ErrGap when the stream no longer holds want
// (trimmed or deleted), else a transient error (the consumer lost messages in flight,
// as an unacknowledged consumer may across a reconnection), after which
// read creates a new consumer from want.
func (s *Set) skipped(ctx context.Context, want, got uint64) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream: expected stream sequence %d, got %d; stream info: %w", want, got, err)
	}
	if info.State.FirstSeq > want {
		return fmt.Errorf("%w: expected stream sequence %d, the stream starts at %d (trimmed)", fanout.ErrGap, want, info.State.FirstSeq)
	}
	if _, err := s.stream.GetMsg(ctx, want); errors.Is(err, js.ErrMsgNotFound) {
		return fmt.Errorf("%w: stream sequence %d was deleted", fanout.ErrGap, want)
	}
	return fmt.Errorf("jetstream: consumer skipped from sequence %d to %d", want, got)
}

// head reads the feeder's heartbeat: the database's newest position and the
// entry's revision.
func (s *Set) head(ctx context.Context) (changefeed.Position, uint64, error) {
	e, err := s.pos.Get(ctx, keyHead)
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream: head: %w", err)
	}
	if len(e.Value()) != 8 {
		return 0, 0, fmt.Errorf("jetstream: head: %d bytes", len(e.Value()))
	}
	return changefeed.Position(binary.BigEndian.Uint64(e.Value())), e.Revision(), nil
}

const (
	keyHead     = "head"
	keySnapshot = "snapshot"
	keyFeeder   = "feeder"
)
