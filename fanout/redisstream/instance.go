package redisstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Instance errors.
var (
	// ErrSnapshotOnly is returned by an Instance's Bootstrap and Rebuild:
	// instances start only from the feeder's snapshots (Follow fails open
	// and retries until there is one).
	ErrSnapshotOnly = errors.New("redisstream: instances start only from the feeder's snapshots")
	// ErrStaleHead is returned by Head when the feeder's heartbeat has not
	// changed for InstanceConfig.HeadTimeout.
	ErrStaleHead = errors.New("redisstream: the feeder's heartbeat is stale")
	// ErrReadOnly is returned by the Save of an instance's snapshot store.
	ErrReadOnly = errors.New("redisstream: instances do not save snapshots (the feeder does)")
)

// InstanceConfig configures an Instance. The zero value of every field
// means its default.
type InstanceConfig struct {
	// HeadTimeout is how long the feeder's heartbeat may stay unchanged
	// before Head reports ErrStaleHead; with no feeder, an instance fails
	// open within HeadTimeout + FollowConfig.MaxLag. Default: 5 s.
	HeadTimeout time.Duration
}

// DefaultHeadTimeout is InstanceConfig.HeadTimeout's default.
const DefaultHeadTimeout = 5 * time.Second

// Instance is the instance side of a set: a bloomgate.Feed over the
// stream, for Gate.Follow with FollowConfig.Snapshots set to Snapshots().
// Stream checks that every batch continues from the position applied; a
// trimmed stream or another history is an error wrapping
// changefeed.ErrRebuild, and Follow starts over from the newest snapshot.
// Head is the feeder's heartbeat. Bootstrap and Rebuild return
// ErrSnapshotOnly; Confirm does nothing. An Instance is safe for concurrent
// use.
type Instance struct {
	s   *Set
	cfg InstanceConfig

	head fanout.HeadWatch[string]
}

var _ bloomgate.Feed = (*Instance)(nil)

// NewInstance returns the instance side of the set.
func (s *Set) NewInstance(cfg InstanceConfig) (*Instance, error) {
	if cfg.HeadTimeout < 0 {
		return nil, fmt.Errorf("%w: negative HeadTimeout", ErrInvalidConfig)
	}
	defaults.Set(&cfg.HeadTimeout, DefaultHeadTimeout)
	return &Instance{s: s, cfg: cfg}, nil
}

// Snapshots returns the store of the feeder's snapshots: Load tries the
// newest two, newest first; Save returns ErrReadOnly.
func (in *Instance) Snapshots() bloomgate.SnapshotStore { return &snapshots{s: in.s} }

// Bootstrap returns ErrSnapshotOnly.
func (in *Instance) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return 0, ErrSnapshotOnly
}

// Rebuild returns ErrSnapshotOnly.
func (in *Instance) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return 0, ErrSnapshotOnly
}

// Stream applies the stream's transactions after from until ctx is done,
// apply fails, or a gap (an error wrapping changefeed.ErrRebuild).
func (in *Instance) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	_, err := in.s.read(ctx, from, 0, apply)
	return err
}

// Head returns the feeder's latest heartbeat, or ErrStaleHead when it has
// not changed for HeadTimeout.
func (in *Instance) Head(ctx context.Context) (changefeed.Position, error) {
	pos, val, err := in.s.readHead(ctx)
	if err != nil {
		return 0, err
	}
	return in.head.Check(pos, val, in.cfg.HeadTimeout, ErrStaleHead)
}

// Confirm does nothing: the stream keeps Config.MaxLen entries.
func (in *Instance) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }

// snapshots is a bloomgate.SnapshotStore of chunked strings; read-only
// unless writable (the feeder's).
type snapshots struct {
	s        *Set
	writable bool
}

var _ bloomgate.SnapshotStore = (*snapshots)(nil)

// advance moves the record forward (a record at or beyond the new one is
// left alone) and keeps the one it replaces as the previous record.
var advance = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, 16) >= string.sub(ARGV[1], 1, 16) then return 0 end
if cur then redis.call('SET', KEYS[2], cur) end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

func (ss *snapshots) chunkKey(pos changefeed.Position, i int) string {
	return fmt.Sprintf("%ssnap:%016x:%d", ss.s.prefix, uint64(pos), i)
}

// chunkWriter writes a snapshot in chunks.
type chunkWriter struct {
	ctx   context.Context
	ss    *snapshots
	pos   changefeed.Position
	buf   []byte
	count int
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), w.ss.s.cfg.ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == w.ss.s.cfg.ChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if err := w.ss.s.cfg.Client.Set(w.ctx, w.ss.chunkKey(w.pos, w.count), w.buf, 0).Err(); err != nil {
		return fmt.Errorf("redisstream: snapshot chunk: %w", err)
	}
	w.count++
	w.buf = w.buf[:0]
	return nil
}

// Save writes the snapshot's chunks, then moves the record forward, then
// deletes the chunks of snapshots no record names.
func (ss *snapshots) Save(ctx context.Context, pos changefeed.Position, write func(io.Writer) error) error {
	if !ss.writable {
		return ErrReadOnly
	}
	w := &chunkWriter{ctx: ctx, ss: ss, pos: pos, buf: make([]byte, 0, ss.s.cfg.ChunkSize)}
	if err := write(w); err != nil {
		return err
	}
	if err := w.flush(); err != nil {
		return err
	}
	rec := fmt.Sprintf("%016x %d", uint64(pos), w.count)
	if err := advance.Run(ctx, ss.s.cfg.Client, []string{ss.s.snap, ss.s.snapPrev}, rec).Err(); err != nil {
		return fmt.Errorf("redisstream: snapshot record: %w", err)
	}
	ss.prune(ctx)
	return nil
}

type record struct {
	pos    changefeed.Position
	chunks int
}

func parseRecord(v string) (record, bool) {
	p, c, ok := strings.Cut(v, " ")
	pos, err1 := strconv.ParseUint(p, 16, 64)
	n, err2 := strconv.Atoi(c)
	return record{changefeed.Position(pos), n}, ok && err1 == nil && err2 == nil && n >= 0
}

// records returns the current and previous records, newest first.
func (ss *snapshots) records(ctx context.Context) ([]record, error) {
	vals, err := ss.s.cfg.Client.MGet(ctx, ss.s.snap, ss.s.snapPrev).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstream: snapshot records: %w", err)
	}
	var recs []record
	for _, v := range vals {
		if s, ok := v.(string); ok {
			if r, ok := parseRecord(s); ok {
				recs = append(recs, r)
			}
		}
	}
	return recs, nil
}

// prune deletes chunks of snapshots older than both records. Failures only
// leave chunks behind.
func (ss *snapshots) prune(ctx context.Context) {
	recs, err := ss.records(ctx)
	if err != nil || len(recs) == 0 {
		return
	}
	oldest := recs[len(recs)-1].pos
	pat := strings.NewReplacer("{", `\{`, "}", `\}`).Replace(ss.s.prefix) + "snap:*"
	iter := ss.s.cfg.Client.Scan(ctx, 0, pat, 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		rest := strings.TrimPrefix(k, ss.s.prefix+"snap:")
		hex, _, _ := strings.Cut(rest, ":")
		if p, err := strconv.ParseUint(hex, 16, 64); err == nil && changefeed.Position(p) < oldest {
			ss.s.cfg.Client.Del(ctx, k)
		}
	}
}

// Load tries the current, then the previous snapshot.
func (ss *snapshots) Load(ctx context.Context, try func(r io.Reader) error) error {
	recs, err := ss.records(ctx)
	if err != nil {
		return err
	}
	errs := []error{bloomgate.ErrNoSnapshot}
	for _, r := range recs {
		err := try(bufio.NewReaderSize(&chunkReader{ctx: ctx, ss: ss, rec: r}, 1<<17))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, fmt.Errorf("snapshot %v: %w", r.pos, err))
	}
	return errors.Join(errs...)
}

// chunkReader reads a snapshot's chunks in order.
type chunkReader struct {
	ctx  context.Context
	ss   *snapshots
	rec  record
	next int
	buf  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.next >= r.rec.chunks {
			return 0, io.EOF
		}
		b, err := r.ss.s.cfg.Client.Get(r.ctx, r.ss.chunkKey(r.rec.pos, r.next)).Bytes()
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
