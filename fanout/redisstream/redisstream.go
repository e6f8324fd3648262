// Package redisstream fans one change feed out to many gate instances over
// a Redis stream, for deployments that run Redis and no NATS. It is the
// only package that imports the Redis client. It mirrors fanout/jetstream:
// one Feeder per set (a lease picks it) publishes, every instance runs
// bloomgate.Gate.Follow over an Instance and its Snapshots.
//
// Keys of set S, all with the hash tag {S} so that they share one cluster
// slot (the append script touches two of them):
//
//   - bg:{S}:log, the stream: one entry per fanout.Batch, field "d", with
//     the entry ID <end LSN>-0, so Redis itself refuses an entry at or below
//     the stream's top (no duplicates after a feeder restart);
//   - bg:{S}:top, the ID of the last entry appended; the append script adds
//     an entry only if top is the one the feeder expects, and moves it (a
//     stale feeder is refused: ErrFenced);
//   - bg:{S}:lease, the feeder lease (SET NX PX, renewed by a script that
//     checks the holder);
//   - bg:{S}:head, the feeder's heartbeat: the database's newest position;
//   - bg:{S}:snapshot and bg:{S}:snapshot.prev, the two newest snapshot
//     records ("<position, 16 hex digits> <chunks>"), moved only forward; the
//     snapshots themselves in chunks bg:{S}:snap:<position>:<i> (Redis has
//     no object store, and a string is limited to 512 MB).
//
// # Durability
//
// Redis acknowledges a write before it is on disk and before any replica
// has it. Run Redis with appendonly yes and appendfsync everysec or always,
// and set Config.WaitReplicas so the feeder waits (WAIT) for replicas
// before it confirms a position to the database. Without that, a Redis
// restart or failover can lose entries the database already released; the
// feeder then finds its position gone and bootstraps, and instances see the
// new history's first entry as a gap (never a silent skip), but the set is
// rebuilt from the database. A stream is one key, on one shard.
//
// Trimming (Config.MaxLen) is silent in Redis (XREAD from a trimmed ID
// returns the oldest surviving entries); instances detect it from each
// batch's previous position. Redis pub/sub is not used.
//
// A Set, its Feeders and its Instances are safe for concurrent use.
// docs/operations.md lists the Redis settings.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Config names a set. The zero value of every field but Client and Set
// means its default.
type Config struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Set names the set: 1 to 64 of A-Z, a-z, 0-9, _ and -. Required.
	Set string
	// MaxLen caps the stream's length (approximately, XADD MAXLEN ~). It
	// must hold more than the feeder's snapshot interval's worth of batches.
	// Default: 1 000 000.
	MaxLen int64
	// LeaseTTL is how long the feeder lease lasts without renewal.
	// Default: 10 s.
	LeaseTTL time.Duration
	// WaitReplicas, when positive, makes the feeder wait (WAIT) until that
	// many replicas hold each batch before it confirms the batch to the
	// database. Default: 0 (no waiting; see Durability).
	WaitReplicas int
	// WaitTimeout bounds each WAIT; fewer replicas than WaitReplicas is an
	// error and the batch is not confirmed. Default: 1 s.
	WaitTimeout time.Duration
	// ChunkSize is the size of a snapshot chunk. Default: 1 MiB.
	ChunkSize int
	// Logger receives lease changes and failures. Default: discard.
	Logger *slog.Logger
}

// Defaults of Config's fields.
const (
	DefaultMaxLen      = 1_000_000
	DefaultLeaseTTL    = 10 * time.Second
	DefaultWaitTimeout = time.Second
	DefaultChunkSize   = 1 << 20
)

// Errors.
var (
	// ErrInvalidConfig reports a Config, FeederConfig or InstanceConfig
	// that cannot be used.
	ErrInvalidConfig = errors.New("redisstream: invalid config")
	// ErrFenced reports an append refused because the stream's top is not
	// the one the feeder expected: another feeder appended.
	ErrFenced = errors.New("redisstream: another feeder appended (fenced)")
)

// Set is a set's keys on a Redis server. It is safe for concurrent use.
type Set struct {
	cfg                                   Config
	log, top, lease, head, snap, snapPrev string
	prefix                                string
}

// Open checks cfg and that the server answers, and returns the Set.
func Open(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Client == nil || !fanout.ValidSet(cfg.Set) {
		return nil, fmt.Errorf("%w: Client is required and Set must be 1-64 of A-Z a-z 0-9 _ -, got %q", ErrInvalidConfig, cfg.Set)
	}
	if cfg.MaxLen < 0 || cfg.LeaseTTL < 0 || cfg.WaitReplicas < 0 || cfg.WaitTimeout < 0 || cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("%w: negative field", ErrInvalidConfig)
	}
	defaults.Set(&cfg.MaxLen, DefaultMaxLen)
	defaults.Set(&cfg.LeaseTTL, DefaultLeaseTTL)
	defaults.Set(&cfg.WaitTimeout, DefaultWaitTimeout)
	defaults.Set(&cfg.ChunkSize, DefaultChunkSize)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redisstream: %w", err)
	}
	p := "bg:{" + cfg.Set + "}:"
	return &Set{cfg: cfg, prefix: p, log: p + "log", top: p + "top", lease: p + "lease", head: p + "head",
		snap: p + "snapshot", snapPrev: p + "snapshot.prev"}, nil
}

// Delete removes every key of the set. No feeder or instance may use the
// set any more.
func (s *Set) Delete(ctx context.Context) error {
	var keys []string
	iter := s.cfg.Client.Scan(ctx, 0, strings.ReplaceAll(strings.ReplaceAll(s.prefix, "{", `\{`), "}", `\}`)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("redisstream: %w", err)
	}
	for _, k := range keys {
		if err := s.cfg.Client.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("redisstream: %w", err)
		}
	}
	return nil
}

// entryID is the stream ID of a batch ending at pos.
func entryID(pos changefeed.Position) string { return strconv.FormatUint(uint64(pos), 10) + "-0" }

// parseID returns the position of an entry ID written by entryID.
func parseID(id string) (changefeed.Position, error) {
	ms, seq, ok := strings.Cut(id, "-")
	v, err := strconv.ParseUint(ms, 10, 64)
	if !ok || seq != "0" || err != nil {
		return 0, fmt.Errorf("%w: entry ID %q", fanout.ErrCorrupt, id)
	}
	return changefeed.Position(v), nil
}

// tail returns the position of the last batch appended (0: none).
func (s *Set) tail(ctx context.Context) (changefeed.Position, error) {
	id, err := s.cfg.Client.Get(ctx, s.top).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisstream: top: %w", err)
	}
	return parseID(id)
}

// read applies the stream's batches after pos (fanout.Continue) and returns
// the position reached. It returns once it reached until (when until > 0),
// or when ctx is done, apply fails, a batch is corrupt, or does not continue
// from pos (an error wrapping fanout.ErrGap: trimmed, lost, another
// history).
func (s *Set) read(ctx context.Context, pos, until changefeed.Position, apply func(changefeed.Txn) error) (changefeed.Position, error) {
	last := entryID(pos)
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		if until > 0 && pos >= until {
			return pos, nil
		}
		res, err := s.cfg.Client.XRead(ctx, &redis.XReadArgs{Streams: []string{s.log, last}, Count: 512, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return pos, ctx.Err()
			}
			s.cfg.Logger.Warn("bloomgate: redis stream read failed, retrying", "err", err)
			if err := retry.Wait(ctx); err != nil {
				return pos, err
			}
			continue
		}
		retry.Reset()
		for _, st := range res {
			for _, m := range st.Messages {
				d, _ := m.Values["d"].(string)
				b, err := fanout.DecodeBatch([]byte(d))
				if err != nil {
					return pos, fmt.Errorf("redisstream: entry %s: %w", m.ID, err)
				}
				if id, err := parseID(m.ID); err != nil || id != b.End() {
					return pos, fmt.Errorf("redisstream: entry %s: %w: ID does not match the batch's end %v", m.ID, fanout.ErrCorrupt, b.End())
				}
				txns, err := fanout.Continue(pos, b)
				if err != nil {
					return pos, fmt.Errorf("redisstream: entry %s: %w", m.ID, err)
				}
				for _, t := range txns {
					if err := apply(t); err != nil {
						return pos, err
					}
					pos = t.End
				}
				last = m.ID
			}
		}
	}
}

// head reads the feeder's heartbeat: "<position> <unix ns>".
func (s *Set) readHead(ctx context.Context) (changefeed.Position, string, error) {
	v, err := s.cfg.Client.Get(ctx, s.head).Result()
	if err != nil {
		return 0, "", fmt.Errorf("redisstream: head: %w", err)
	}
	p, _, _ := strings.Cut(v, " ")
	pos, err := strconv.ParseUint(p, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("redisstream: head %q: %w", v, err)
	}
	return changefeed.Position(pos), v, nil
}
