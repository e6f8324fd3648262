// Package redisstream fans one change feed out to many gate instances over
// a Redis stream, for deployments that run Redis and no NATS. It is the
// only package that imports the Redis client, and it only moves bytes: the
// feeder, the instances and every check they make are package fanout's,
// the same as over NATS JetStream (fanout/jetstream).
//
// Keys of set S, all with the hash tag {S} so that they share one cluster
// slot (the scripts touch several):
//
//   - bg:{S}:log, the stream: one entry per fanout.Batch, field "d", with
//     an ID Redis assigns; the append script adds an entry only when the
//     stream's last entry is the one the feeder appended after (a stale
//     feeder, or one that finds someone else's entry there, is refused);
//   - bg:{S}:lease, the feeder lease ("<holder>|<term>", SET NX PX, renewed
//     by a script that checks the holder), and bg:{S}:term, the counter
//     each new lease takes its term from;
//   - bg:{S}:kv:head, the feeder's heartbeat; bg:{S}:kv:snapshot and
//     bg:{S}:kv:snapshot.prev, the two newest snapshot records (hashes of
//     value and revision);
//   - bg:{S}:obj:<name>:<i>, the snapshots in chunks (Redis has no object
//     store, and a string is limited to 512 MB), bg:{S}:obj:<name> their
//     chunk count, and the set bg:{S}:objects of their names;
//   - bg:{S}:config, the settings the set was opened with.
//
// # Durability
//
// Redis acknowledges a write before it is on disk and before any replica
// has it. Run Redis with appendonly yes and appendfsync everysec or always,
// and set Config.WaitReplicas so the feeder waits (WAIT) for replicas
// before it confirms a position to the database. Without that, a Redis
// restart or failover can lose entries the database already released; the
// feeder then finds a tail it cannot continue and starts a new history from
// the database (never a silent skip), and instances move to it through its
// snapshot. A stream is one key, on one shard.
//
// Trimming (Config.MaxLen) is silent in Redis (XREAD from a trimmed ID
// returns the oldest surviving entries); instances detect it from each
// batch's previous position. Redis pub/sub is not used.
//
// A Set, its Feeders and its Instances are safe for concurrent use.
// docs/operations.md lists the Redis settings and permissions.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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
	// Key, if set (at least 16 bytes), authenticates every batch, heartbeat
	// and snapshot record with HMAC-SHA256; instances refuse anything not
	// signed with it. Every process of the set needs the same Key. Use it
	// where others may write the set's keys. Default: nil.
	Key []byte
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
	// ErrInvalidConfig reports a Config that cannot be used.
	ErrInvalidConfig = errors.New("redisstream: invalid config")
	// ErrMismatch reports a set opened before with other settings (MaxLen,
	// LeaseTTL, WaitReplicas): Open changes nothing then.
	ErrMismatch = errors.New("redisstream: the set was opened with another Config")
)

// Set is a set's keys on a Redis server. It is safe for concurrent use.
type Set struct {
	cfg                                  Config
	prefix, log, lease, term, objs, conf string
}

// Open checks cfg and that the server answers, records the set's settings
// on first use, and returns the Set. A set recorded with other settings is
// an error wrapping ErrMismatch.
func Open(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Client == nil || !fanout.ValidSet(cfg.Set) {
		return nil, fmt.Errorf("%w: Client is required and Set must be 1-64 of A-Z a-z 0-9 _ -, got %q", ErrInvalidConfig, cfg.Set)
	}
	if cfg.MaxLen < 0 || cfg.LeaseTTL < 0 || cfg.WaitReplicas < 0 || cfg.WaitTimeout < 0 || cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("%w: negative field", ErrInvalidConfig)
	}
	if len(cfg.Key) > 0 && len(cfg.Key) < 16 {
		return nil, fmt.Errorf("%w: Key must be at least 16 bytes", ErrInvalidConfig)
	}
	defaults.Set(&cfg.MaxLen, DefaultMaxLen)
	defaults.Set(&cfg.LeaseTTL, DefaultLeaseTTL)
	defaults.Set(&cfg.WaitTimeout, DefaultWaitTimeout)
	defaults.Set(&cfg.ChunkSize, DefaultChunkSize)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := "bg:{" + cfg.Set + "}:"
	s := &Set{cfg: cfg, prefix: p, log: p + "log", lease: p + "lease", term: p + "term", objs: p + "objects", conf: p + "config"}
	want := fmt.Sprintf("maxlen=%d lease_ttl=%v wait_replicas=%d", cfg.MaxLen, cfg.LeaseTTL, cfg.WaitReplicas)
	// Read first: an instance's user may not write, and finds the settings
	// its set's feeder recorded.
	have, err := cfg.Client.Get(ctx, s.conf).Result()
	if errors.Is(err, redis.Nil) {
		if err := cfg.Client.SetNX(ctx, s.conf, want, 0).Err(); err != nil {
			return nil, fmt.Errorf("redisstream: %w", err)
		}
		have, err = cfg.Client.Get(ctx, s.conf).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("redisstream: %w", err)
	}
	if have != want {
		return nil, fmt.Errorf("%w: set %s has %q, the Config asks for %q", ErrMismatch, cfg.Set, have, want)
	}
	return s, nil
}

// Delete removes every key of the set. No feeder or instance may use the
// set any more.
func (s *Set) Delete(ctx context.Context) error {
	var keys []string
	iter := s.cfg.Client.Scan(ctx, 0, escape(s.prefix)+"*", 1000).Iterator()
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

func escape(p string) string { return strings.NewReplacer("{", `\{`, "}", `\}`).Replace(p) }

// FeederConfig configures a feeder (fanout.FeederConfig).
type FeederConfig = fanout.FeederConfig

// InstanceConfig configures an instance (fanout.InstanceConfig).
type InstanceConfig = fanout.InstanceConfig

// NewFeeder returns a feeder for the set.
func (s *Set) NewFeeder(cfg FeederConfig) (*fanout.Feeder, error) {
	return fanout.NewFeeder(s.backend(), cfg)
}

// NewInstance returns the instance side of the set. It needs no database.
func (s *Set) NewInstance(cfg InstanceConfig) (*fanout.Instance, error) {
	return fanout.NewInstance(s.backend(), cfg)
}

// Backend returns the set's adapter for the fan-out engine
// (fanout.NewFeeder, fanout.NewInstance, the conformance suite).
func (s *Set) Backend() fanout.Backend { return s.backend() }

func (s *Set) backend() fanout.Backend {
	return fanout.Backend{
		Name: s.cfg.Set, Log: (*rLog)(s), Store: (*rStore)(s), LeaseTTL: s.cfg.LeaseTTL,
		NewLease: func() fanout.Lease { return &rLease{s: s} },
		Key:      s.cfg.Key, Logger: s.cfg.Logger,
	}
}

// rLog is the stream as a fanout.Log; cursors are entry IDs.
type rLog Set

var _ fanout.Log = (*rLog)(nil)

// appendEntry adds an entry (ID *) only if the stream's last entry is
// ARGV[1] ("" for none), or returns the last entry's ID when it is ARGV[2]
// itself right after ARGV[1] (an earlier attempt). A stream whose last ID
// cannot grow (someone added the largest ID) is started afresh: the entry
// is a new history's first anyway.
var appendEntry = redis.NewScript(`
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local topid = ''
if #top > 0 then topid = top[1][1] end
if topid ~= ARGV[1] then
  if #top > 0 and top[1][2][1] == 'd' and top[1][2][2] == ARGV[2] then
    local prev = redis.call('XREVRANGE', KEYS[1], '(' .. topid, '-', 'COUNT', 1)
    local previd = ''
    if #prev > 0 then previd = prev[1][1] end
    if previd == ARGV[1] then return topid end
  end
  return redis.error_reply('BGFENCED stream top is ' .. topid)
end
local ok, id = pcall(redis.call, 'XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'd', ARGV[2])
if ok then return id end
redis.call('DEL', KEYS[1])
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'd', ARGV[2])`)

func (l *rLog) Append(ctx context.Context, after fanout.Cursor, data []byte) (fanout.Cursor, error) {
	c := l.cfg.Client
	var id string
	var err error
	var wait *redis.Cmd
	args := []any{string(after), data, l.cfg.MaxLen}
	if l.cfg.WaitReplicas == 0 {
		id, err = appendEntry.Run(ctx, c, []string{l.log}, args...).Text()
	} else {
		// WAIT counts the writes of its own connection: one pipeline.
		var cmds []redis.Cmder
		cmds, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			appendEntry.Eval(ctx, p, []string{l.log}, args...)
			wait = p.Do(ctx, "WAIT", l.cfg.WaitReplicas, l.cfg.WaitTimeout.Milliseconds())
			return nil
		})
		if len(cmds) > 0 {
			id, err = cmds[0].(*redis.Cmd).Text()
		}
	}
	if err != nil && strings.HasPrefix(err.Error(), "BGFENCED") {
		return "", fmt.Errorf("%w: %v", fanout.ErrFenced, err)
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Eval in a pipeline does not load the script: load it, retry.
		appendEntry.Load(ctx, c)
	}
	if err == nil && wait != nil {
		var n int64
		if n, err = wait.Int64(); err == nil && n < int64(l.cfg.WaitReplicas) {
			err = fmt.Errorf("WAIT: %d of %d replicas", n, l.cfg.WaitReplicas)
		}
	}
	if err != nil {
		return "", fmt.Errorf("redisstream: append: %w", err)
	}
	return fanout.Cursor(id), nil
}

func (l *rLog) Last(ctx context.Context) (fanout.Entry, fanout.Cursor, error) {
	msgs, err := l.cfg.Client.XRevRangeN(ctx, l.log, "+", "-", 1).Result()
	if err != nil {
		return fanout.Entry{}, "", fmt.Errorf("redisstream: last entry: %w", err)
	}
	if len(msgs) == 0 {
		return fanout.Entry{}, "", nil
	}
	d, _ := msgs[0].Values["d"].(string)
	// Appends go after the top entry (the script checks it), so a deleted
	// top leaves no hole to detect here.
	return fanout.Entry{Cursor: fanout.Cursor(msgs[0].ID), Data: []byte(d)}, fanout.Cursor(msgs[0].ID), nil
}

// Read applies the stream's entries after after. Redis cannot tell a
// trimmed entry; the engine sees it in the batches' previous positions. A
// stream started afresh behind after (its last ID below it) is a gap.
func (l *rLog) Read(ctx context.Context, after fanout.Cursor, fn func(fanout.Entry) error) error {
	last := string(after)
	if last == "" {
		last = "0-0"
	}
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		res, err := l.cfg.Client.XRead(ctx, &redis.XReadArgs{Streams: []string{l.log, last}, Count: 512, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			if behind, err := l.restarted(ctx, last); err == nil && behind {
				return fmt.Errorf("%w: the stream was started afresh below entry %s", fanout.ErrGap, last)
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			l.cfg.Logger.Warn("bloomgate: redis stream read failed, retrying", "set", l.cfg.Set, "err", err)
			if bo.Wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		bo.Reset()
		for _, st := range res {
			for _, m := range st.Messages {
				d, _ := m.Values["d"].(string)
				if err := fn(fanout.Entry{Cursor: fanout.Cursor(m.ID), Data: []byte(d)}); err != nil {
					return err
				}
				last = m.ID
			}
		}
	}
}

// restarted reports whether the stream's last entry sorts below id.
func (l *rLog) restarted(ctx context.Context, id string) (bool, error) {
	msgs, err := l.cfg.Client.XRevRangeN(ctx, l.log, "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 || id == "0-0" {
		return false, err
	}
	return idLess(msgs[0].ID, id), nil
}

func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		return x < y
	}
	p, _ := strconv.ParseUint(as, 10, 64)
	q, _ := strconv.ParseUint(bs, 10, 64)
	return p < q
}

// rLease is the lease key as a fanout.Lease.
type rLease struct {
	s     *Set
	value string
}

var (
	acquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local term = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. term, 'PX', ARGV[2])
return term`)
	renew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)
	release = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

func (l *rLease) Acquire(ctx context.Context, holder string) (uint64, error) {
	term, err := acquire.Run(ctx, l.s.cfg.Client, []string{l.s.lease, l.s.term}, holder, l.s.cfg.LeaseTTL.Milliseconds()).Uint64()
	if err != nil {
		return 0, fmt.Errorf("redisstream: lease: %w", err)
	}
	if term == 0 {
		return 0, fanout.ErrHeld
	}
	l.value = holder + "|" + strconv.FormatUint(term, 10)
	return term, nil
}

func (l *rLease) Renew(ctx context.Context) error {
	n, err := renew.Run(ctx, l.s.cfg.Client, []string{l.s.lease}, l.value, l.s.cfg.LeaseTTL.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("redisstream: lease: %w", err)
	}
	if n != 1 {
		return fanout.ErrLost
	}
	return nil
}

func (l *rLease) Release(ctx context.Context) error {
	return release.Run(ctx, l.s.cfg.Client, []string{l.s.lease}, l.value).Err()
}

// rStore keeps values as hashes {v, r} (value, revision) and objects in
// chunks.
type rStore Set

var _ fanout.Store = (*rStore)(nil)

var (
	put = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], 'r', 1)
redis.call('HSET', KEYS[1], 'v', ARGV[1])
return 1`)
	compareAndPut = redis.NewScript(`
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if r ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'r', r + 1)
return r + 1`)
)

func (s *rStore) key(k string) string { return s.prefix + "kv:" + k }

func (s *rStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	vals, err := s.cfg.Client.HMGet(ctx, s.key(key), "v", "r").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redisstream: %s: %w", key, err)
	}
	v, ok1 := vals[0].(string)
	r, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return nil, 0, fmt.Errorf("%w: %s", fanout.ErrNotFound, key)
	}
	rev, _ := strconv.ParseUint(r, 10, 64)
	return []byte(v), rev, nil
}

func (s *rStore) Put(ctx context.Context, key string, val []byte) error {
	if err := put.Run(ctx, s.cfg.Client, []string{s.key(key)}, val).Err(); err != nil {
		return fmt.Errorf("redisstream: %s: %w", key, err)
	}
	return nil
}

func (s *rStore) CompareAndPut(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	n, err := compareAndPut.Run(ctx, s.cfg.Client, []string{s.key(key)}, val, rev).Uint64()
	if err != nil {
		return 0, fmt.Errorf("redisstream: %s: %w", key, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: %s", fanout.ErrConflict, key)
	}
	return n, nil
}

func (s *rStore) chunk(name string, i int) string {
	return fmt.Sprintf("%sobj:%s:%d", s.prefix, name, i)
}

func (s *rStore) PutObject(ctx context.Context, name string, r io.Reader) error {
	buf := make([]byte, s.cfg.ChunkSize)
	n := 0
	for {
		k, err := io.ReadFull(r, buf)
		if k > 0 {
			if err := s.cfg.Client.Set(ctx, s.chunk(name, n), buf[:k], 0).Err(); err != nil {
				return fmt.Errorf("redisstream: snapshot chunk: %w", err)
			}
			n++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := s.cfg.Client.Set(ctx, s.prefix+"obj:"+name, n, 0).Err(); err != nil {
		return fmt.Errorf("redisstream: snapshot: %w", err)
	}
	return s.cfg.Client.SAdd(ctx, s.objs, name).Err()
}

func (s *rStore) GetObject(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	n, err := s.cfg.Client.Get(ctx, s.prefix+"obj:"+name).Int()
	if errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("%w: object %s", fanout.ErrNotFound, name)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("redisstream: snapshot: %w", err)
	}
	return io.NopCloser(&chunkReader{ctx: ctx, s: s, name: name, chunks: n}), 0, nil
}

func (s *rStore) Objects(ctx context.Context) ([]string, error) {
	return s.cfg.Client.SMembers(ctx, s.objs).Result()
}

func (s *rStore) DeleteObject(ctx context.Context, name string) error {
	n, err := s.cfg.Client.Get(ctx, s.prefix+"obj:"+name).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	s.cfg.Client.SRem(ctx, s.objs, name)
	keys := []string{s.prefix + "obj:" + name}
	for i := range n {
		keys = append(keys, s.chunk(name, i))
	}
	for _, k := range keys {
		if err := s.cfg.Client.Del(ctx, k).Err(); err != nil {
			return err
		}
	}
	return nil
}

// chunkReader reads an object's chunks in order.
type chunkReader struct {
	ctx    context.Context
	s      *rStore
	name   string
	chunks int
	next   int
	buf    []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.next >= r.chunks {
			return 0, io.EOF
		}
		b, err := r.s.cfg.Client.Get(r.ctx, r.s.chunk(r.name, r.next)).Bytes()
		if err != nil {
			return 0, fmt.Errorf("redisstream: snapshot chunk %d: %w", r.next, err)
		}
		r.buf = b
		r.next++
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
