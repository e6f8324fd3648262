// Package jetstream fans one change feed out to many gate instances over
// NATS JetStream (server 2.9 or later). It is the only package that imports
// the NATS client, and it only moves bytes: the feeder, the instances and
// every check they make are package fanout's, the same for every log.
//
// A set (one table's key column, say) lives in four JetStream assets, all
// created by Open with Config.Replicas replicas, file storage:
//
//   - stream BG_<set>, subject bloomgate.<set>: the log. Each message is a
//     fanout.Batch, published with expected-last-sequence (so a writer
//     that is not at the tail is refused) and a Nats-Msg-Id derived from
//     the sequence it follows and its bytes (so a retried publish is not
//     stored twice).
//   - KV bucket BG_<set>_lease, key "feeder": the feeder lease, taken by
//     create (compare-and-set on "no key"), renewed by revision, expiring
//     after Config.LeaseTTL on the server's clock. The revision of the
//     create is the lease's term.
//   - KV bucket BG_<set>_pos: key "head", the feeder's heartbeat; keys
//     "snapshot" and "snapshot.prev", the two newest snapshot records.
//   - object store BG_<set>_snap: the snapshots, in bloomgate's snapshot
//     format.
//
// One Feeder per set (any number may run; the lease picks one) follows the
// database and publishes; every instance runs bloomgate.Gate.Follow over an
// Instance and its Snapshots. See fanout.Feeder and fanout.Instance for
// their guarantees, and docs/operations.md for the permissions and the
// server settings (sync_interval) a set needs.
//
// A Set, its Feeders and its Instances are safe for concurrent use.
package jetstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

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
	// Key, if set (at least 16 bytes), authenticates every batch, heartbeat
	// and snapshot record with HMAC-SHA256; instances refuse anything not
	// signed with it. Every process of the set needs the same Key. Use it
	// where others may publish on the set's subjects. Default: nil.
	Key []byte
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

// Errors.
var (
	// ErrInvalidConfig reports a Config that cannot be used.
	ErrInvalidConfig = errors.New("jetstream: invalid config")
	// ErrMismatch reports a set whose existing assets disagree with the
	// Config passed to Open (replicas, storage, limits). Open changes
	// nothing then: an operator changes a set's assets (docs/operations.md).
	ErrMismatch = errors.New("jetstream: the set's assets disagree with the Config")
)

// Set is an opened set: its stream, buckets and object store. It is safe
// for concurrent use.
type Set struct {
	cfg     Config
	subject string
	stream  js.Stream
	pos     js.KeyValue
	lease   js.KeyValue
	objects js.ObjectStore
	objStr  js.Stream             // the object store's stream, read by sequence
	leader  nats.JetStreamContext // reads the position bucket from its stream's leader
}

// Open creates the set's stream, buckets and object store if they do not
// exist, and returns the Set. Assets that exist with other settings than
// cfg asks for (replicas, storage, max age, duplicates window, lease TTL)
// are an error wrapping ErrMismatch, and are left as they are.
func Open(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.JetStream == nil || !fanout.ValidSet(cfg.Set) {
		return nil, fmt.Errorf("%w: JetStream is required and Set must be 1-64 of A-Z a-z 0-9 _ -, got %q", ErrInvalidConfig, cfg.Set)
	}
	if cfg.Replicas < 0 || cfg.MaxAge < 0 || cfg.Duplicates < 0 || cfg.LeaseTTL < 0 {
		return nil, fmt.Errorf("%w: negative Replicas or duration", ErrInvalidConfig)
	}
	if len(cfg.Key) > 0 && len(cfg.Key) < 16 {
		return nil, fmt.Errorf("%w: Key must be at least 16 bytes", ErrInvalidConfig)
	}
	defaults.Set(&cfg.Replicas, DefaultReplicas)
	defaults.Set(&cfg.MaxAge, DefaultMaxAge)
	defaults.Set(&cfg.Duplicates, DefaultDuplicates)
	defaults.Set(&cfg.LeaseTTL, DefaultLeaseTTL)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{cfg: cfg, subject: "bloomgate." + cfg.Set}
	j := cfg.JetStream
	var err error
	if s.stream, err = answered(ctx, func(ctx context.Context) (js.Stream, error) {
		return openStream(ctx, j, js.StreamConfig{
			Name: streamName(cfg.Set), Subjects: []string{s.subject}, Storage: js.FileStorage,
			Replicas: cfg.Replicas, MaxAge: cfg.MaxAge, Duplicates: cfg.Duplicates,
		})
	}); err != nil {
		return nil, err
	}
	if s.pos, err = answered(ctx, func(ctx context.Context) (js.KeyValue, error) {
		return openKV(ctx, j, js.KeyValueConfig{
			Bucket: "BG_" + cfg.Set + "_pos", History: 1, Replicas: cfg.Replicas, Storage: js.FileStorage,
		})
	}); err != nil {
		return nil, err
	}
	if s.lease, err = answered(ctx, func(ctx context.Context) (js.KeyValue, error) {
		return openKV(ctx, j, js.KeyValueConfig{
			Bucket: "BG_" + cfg.Set + "_lease", History: 1, TTL: cfg.LeaseTTL, Replicas: cfg.Replicas, Storage: js.FileStorage,
		})
	}); err != nil {
		return nil, err
	}
	if s.objects, err = answered(ctx, func(ctx context.Context) (js.ObjectStore, error) {
		return openObjects(ctx, j, js.ObjectStoreConfig{
			Bucket: "BG_" + cfg.Set + "_snap", Replicas: cfg.Replicas, Storage: js.FileStorage,
		})
	}); err != nil {
		return nil, err
	}
	if s.objStr, err = answered(ctx, func(ctx context.Context) (js.Stream, error) {
		return j.Stream(ctx, "OBJ_BG_"+cfg.Set+"_snap")
	}); err != nil {
		return nil, fmt.Errorf("jetstream: object store BG_%s_snap: %w", cfg.Set, err)
	}
	// The client reads a bucket by direct gets, which any replica answers,
	// a lagging one too; the heartbeat's freshness bound needs a read that
	// shows every write completed before it began, so Store.Get asks the
	// stream's leader (the older client API does that unless told not to).
	var lopts []nats.JSOpt
	switch o := j.Options(); {
	case o.Domain != "":
		lopts = append(lopts, nats.Domain(o.Domain))
	case o.APIPrefix != "":
		lopts = append(lopts, nats.APIPrefix(o.APIPrefix))
	}
	if s.leader, err = j.Conn().JetStream(lopts...); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return s, nil
}

// openAttempt bounds one attempt at opening an asset, or at a request
// that precedes an upload.
const openAttempt = 2 * time.Second

// answered runs open in attempts bounded by openAttempt, again at once
// (after at most half a second) while an attempt goes unanswered, until
// ctx ends. A JetStream API request can go unanswered while the cluster's
// meta leader, or the asset's, is being elected — a cluster just formed, a
// leader moving — and would otherwise wait out the whole of ctx (the
// start's connect-timeout) for a reply that never comes. Every attempt
// looks the asset up first, so an attempt whose create went through but
// whose reply was lost finds the asset the next time.
func answered[T any](ctx context.Context, open func(context.Context) (T, error)) (T, error) {
	wait := 10 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		v, err := open(actx)
		cancel()
		if err == nil || !unanswered(err) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// unanswered reports whether err says a request got no reply, or that
// JetStream is not available yet (503) or has no peers to place a
// replicated asset on yet, rather than an answer.
func unanswered(err error) bool {
	var apiErr *js.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, js.ErrNoStreamResponse) ||
		(errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.ErrorCode == errCodeNoPeers))
}

// errCodeNoPeers is JetStream's "no suitable peers for placement": while
// the cluster regains its nodes (or forms), the meta leader may not count
// enough of them for the asset's replicas yet. A cluster that never will
// has Open fail with it when its context ends.
const errCodeNoPeers js.ErrorCode = 10005

func openStream(ctx context.Context, j js.JetStream, want js.StreamConfig) (js.Stream, error) {
	st, err := j.Stream(ctx, want.Name)
	if errors.Is(err, js.ErrStreamNotFound) {
		st, err = j.CreateStream(ctx, want)
		if errors.Is(err, js.ErrStreamNameAlreadyInUse) {
			st, err = j.Stream(ctx, want.Name) // another process created it
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", want.Name, err)
	}
	have := st.CachedInfo().Config
	return st, mismatch("stream "+want.Name,
		diff{"replicas", have.Replicas, want.Replicas},
		diff{"storage", have.Storage, want.Storage},
		diff{"max age", have.MaxAge, want.MaxAge},
		diff{"duplicates window", have.Duplicates, want.Duplicates},
		diff{"subjects", fmt.Sprint(have.Subjects), fmt.Sprint(want.Subjects)})
}

func openKV(ctx context.Context, j js.JetStream, want js.KeyValueConfig) (js.KeyValue, error) {
	kv, err := j.KeyValue(ctx, want.Bucket)
	if errors.Is(err, js.ErrBucketNotFound) {
		kv, err = j.CreateKeyValue(ctx, want)
		if errors.Is(err, js.ErrBucketExists) || errors.Is(err, js.ErrStreamNameAlreadyInUse) {
			kv, err = j.KeyValue(ctx, want.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: bucket %s: %w", want.Bucket, err)
	}
	info := st.(*js.KeyValueBucketStatus).StreamInfo().Config
	return kv, mismatch("bucket "+want.Bucket,
		diff{"replicas", info.Replicas, want.Replicas},
		diff{"storage", info.Storage, want.Storage},
		diff{"TTL", info.MaxAge, want.TTL})
}

func openObjects(ctx context.Context, j js.JetStream, want js.ObjectStoreConfig) (js.ObjectStore, error) {
	obs, err := j.ObjectStore(ctx, want.Bucket)
	if errors.Is(err, js.ErrBucketNotFound) {
		obs, err = j.CreateObjectStore(ctx, want)
		if errors.Is(err, js.ErrBucketExists) || errors.Is(err, js.ErrStreamNameAlreadyInUse) {
			obs, err = j.ObjectStore(ctx, want.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: object store %s: %w", want.Bucket, err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: object store %s: %w", want.Bucket, err)
	}
	return obs, mismatch("object store "+want.Bucket,
		diff{"replicas", st.Replicas(), want.Replicas},
		diff{"storage", st.Storage(), want.Storage})
}

type diff struct {
	what       string
	have, want any
}

func mismatch(asset string, ds ...diff) error {
	for _, d := range ds {
		if d.have != d.want {
			return fmt.Errorf("%w: %s has %s %v, the Config asks for %v", ErrMismatch, asset, d.what, d.have, d.want)
		}
	}
	return nil
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
		Name: s.cfg.Set, Log: (*jsLog)(s), Store: (*jsStore)(s), LeaseTTL: s.cfg.LeaseTTL,
		NewLease: func() fanout.Lease { return &jsLease{s: s} },
		Key:      s.cfg.Key, Logger: s.cfg.Logger,
	}
}

// jsLog is the stream as a fanout.Log; cursors are stream sequences.
type jsLog Set

var _ fanout.Log = (*jsLog)(nil)

func seqOf(c fanout.Cursor) (uint64, error) {
	if c == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(string(c), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("jetstream: cursor %q: %w", c, err)
	}
	return v, nil
}

func cursor(seq uint64) fanout.Cursor { return fanout.Cursor(strconv.FormatUint(seq, 10)) }

func wrongLast(err error) bool {
	var apiErr *js.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == js.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == js.JSErrCodeStreamWrongLastSequenceConstant)
}

func (l *jsLog) Append(ctx context.Context, after fanout.Cursor, data []byte) (fanout.Cursor, error) {
	seq, err := seqOf(after)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	m := nats.NewMsg(l.subject)
	m.Data = data
	ack, err := l.cfg.JetStream.PublishMsg(ctx, m, js.WithExpectLastSequence(seq),
		js.WithMsgID(strconv.FormatUint(seq, 10)+"-"+hex.EncodeToString(sum[:12])))
	switch {
	case err == nil && ack.Sequence == seq+1:
		return cursor(ack.Sequence), nil
	case err == nil:
		return "", fmt.Errorf("%w: stored as sequence %d, expected %d", fanout.ErrFenced, ack.Sequence, seq+1)
	case wrongLast(err):
		// An earlier attempt of ours may be the one after seq.
		if m, gerr := l.stream.GetMsg(ctx, seq+1); gerr == nil && bytes.Equal(m.Data, data) {
			return cursor(seq + 1), nil
		}
		return "", fmt.Errorf("%w: %v", fanout.ErrFenced, err)
	}
	return "", fmt.Errorf("jetstream: publish: %w", err)
}

var _ fanout.AsyncAppender = (*jsLog)(nil)

// AppendAsync publishes data without waiting for the ack, with the same
// expected last sequence and message ID as Append: the stream assigns
// sequences one after the other, so the entry's is after's plus one, and
// the server stores it only there (a message whose predecessor was not
// stored is refused), so a pipeline is stored in order or not at all
// from the first failure on.
func (l *jsLog) AppendAsync(ctx context.Context, after fanout.Cursor, data []byte) (fanout.Cursor, <-chan error, error) {
	seq, err := seqOf(after)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(data)
	m := nats.NewMsg(l.subject)
	m.Data = data
	f, err := l.cfg.JetStream.PublishMsgAsync(m, js.WithExpectLastSequence(seq),
		js.WithMsgID(strconv.FormatUint(seq, 10)+"-"+hex.EncodeToString(sum[:12])))
	if err != nil {
		return "", nil, fmt.Errorf("jetstream: publish: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		select {
		case ack := <-f.Ok():
			if ack.Sequence != seq+1 {
				done <- fmt.Errorf("%w: stored as sequence %d, expected %d", fanout.ErrFenced, ack.Sequence, seq+1)
				return
			}
			done <- nil
		case err := <-f.Err():
			done <- fmt.Errorf("jetstream: publish: %w", err)
		case <-ctx.Done():
			done <- fmt.Errorf("jetstream: publish: %w", ctx.Err())
		}
	}()
	return cursor(seq + 1), done, nil
}

func (l *jsLog) Last(ctx context.Context) (fanout.Entry, fanout.Cursor, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return fanout.Entry{}, "", fmt.Errorf("jetstream: stream info: %w", err)
	}
	tail := cursor(info.State.LastSeq)
	if info.State.Msgs == 0 {
		return fanout.Entry{Cursor: tail}, tail, nil
	}
	m, err := l.stream.GetLastMsgForSubject(ctx, l.subject)
	if err == nil {
		return fanout.Entry{Cursor: cursor(m.Sequence), Data: m.Data}, tail, nil
	}
	if !errors.Is(err, js.ErrMsgNotFound) {
		return fanout.Entry{}, "", fmt.Errorf("jetstream: last message: %w", err)
	}
	// The newest messages were deleted: walk back to the last one left.
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0; seq-- {
		m, err := l.stream.GetMsg(ctx, seq)
		if err == nil {
			return fanout.Entry{Cursor: cursor(m.Sequence), Data: m.Data}, tail, nil
		}
		if !errors.Is(err, js.ErrMsgNotFound) {
			return fanout.Entry{}, "", fmt.Errorf("jetstream: message %d: %w", seq, err)
		}
	}
	return fanout.Entry{Cursor: tail}, tail, nil
}

// Read applies the stream's messages after after. It checks that sequences
// follow each other: a trimmed or deleted message is an error wrapping
// fanout.ErrGap. Consumers lost with a server are recreated.
func (l *jsLog) Read(ctx context.Context, after fanout.Cursor, fn func(fanout.Entry) error) error {
	seq, err := seqOf(after)
	if err != nil {
		return err
	}
	next := seq + 1
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		err := l.readFrom(ctx, &next, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *consumerError
		if !errors.As(err, &ce) {
			return err
		}
		l.cfg.Logger.Warn("bloomgate: jetstream consumer failed, recreating", "set", l.cfg.Set, "seq", next, "err", err)
		if bo.Wait(ctx) != nil {
			return ctx.Err()
		}
	}
}

// consumerError is a consumer failure Read recovers from.
type consumerError struct{ err error }

func (e *consumerError) Error() string { return e.err.Error() }
func (e *consumerError) Unwrap() error { return e.err }

// readFrom runs one ephemeral consumer (R1, in memory, no acks) from
// *next. The consumer's idle heartbeats reveal a consumer lost with its
// server; Read then creates another one. (The client's ordered consumer
// retries its re-creation forever, inside Next, which kept an instance
// stuck when a server went away.)
func (l *jsLog) readFrom(ctx context.Context, next *uint64, fn func(fanout.Entry) error) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	cons, err := l.stream.CreateConsumer(cctx, js.ConsumerConfig{
		DeliverPolicy:     js.DeliverByStartSequencePolicy,
		OptStartSeq:       *next,
		AckPolicy:         js.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	cancel()
	if err != nil {
		return &consumerError{fmt.Errorf("jetstream: consumer: %w", err)}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
		cancel()
	}()
	it, err := cons.Messages(js.PullExpiry(5*time.Second), js.PullHeartbeat(time.Second))
	if err != nil {
		return &consumerError{fmt.Errorf("jetstream: consumer: %w", err)}
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
			return &consumerError{fmt.Errorf("jetstream: next message: %w", err)}
		}
		md, err := m.Metadata()
		if err != nil {
			return &consumerError{fmt.Errorf("jetstream: message metadata: %w", err)}
		}
		seq := md.Sequence.Stream
		if seq < *next {
			continue // redelivered after a consumer reset
		}
		if seq > *next {
			return l.skipped(ctx, *next, seq)
		}
		if err := fn(fanout.Entry{Cursor: cursor(seq), Data: m.Data()}); err != nil {
			return err
		}
		*next = seq + 1
	}
}

// skipped explains a consumer that delivered got where want was due: an
// error wrapping fanout.ErrGap when the stream no longer holds want
// (trimmed or deleted), else a consumer error (the consumer lost messages
// in flight, as an unacknowledged consumer may across a reconnection),
// after which Read creates a new consumer from want.
func (l *jsLog) skipped(ctx context.Context, want, got uint64) error {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return &consumerError{fmt.Errorf("jetstream: expected stream sequence %d, got %d; stream info: %w", want, got, err)}
	}
	if info.State.FirstSeq > want {
		return fmt.Errorf("%w: expected stream sequence %d, the stream starts at %d (trimmed)", fanout.ErrGap, want, info.State.FirstSeq)
	}
	if _, err := l.stream.GetMsg(ctx, want); errors.Is(err, js.ErrMsgNotFound) {
		return fmt.Errorf("%w: stream sequence %d was deleted", fanout.ErrGap, want)
	}
	return &consumerError{fmt.Errorf("jetstream: consumer skipped from sequence %d to %d", want, got)}
}

// jsLease is the lease key as a fanout.Lease.
type jsLease struct {
	s      *Set
	holder string
	rev    uint64
}

const keyFeeder = "feeder"

func (l *jsLease) Acquire(ctx context.Context, holder string) (uint64, error) {
	rev, err := l.s.lease.Create(ctx, keyFeeder, []byte(holder))
	if errors.Is(err, js.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %v", fanout.ErrHeld, err)
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: lease: %w", err)
	}
	l.holder, l.rev = holder, rev
	return rev, nil
}

func (l *jsLease) Renew(ctx context.Context) error {
	rev, err := l.s.lease.Update(ctx, keyFeeder, []byte(l.holder), l.rev)
	switch {
	case err == nil:
		l.rev = rev
		return nil
	case errors.Is(err, js.ErrKeyExists), errors.Is(err, js.ErrKeyNotFound), wrongLast(err):
		return fmt.Errorf("%w: %v", fanout.ErrLost, err)
	}
	return fmt.Errorf("jetstream: lease: %w", err)
}

func (l *jsLease) Release(ctx context.Context) error {
	return l.s.lease.Delete(ctx, keyFeeder, js.LastRevision(l.rev))
}

// jsStore is the position bucket and the object store as a fanout.Store.
type jsStore Set

var _ fanout.Store = (*jsStore)(nil)

// Get reads key from the position bucket's stream leader (see Open): a
// value, once written, is never followed by an older one.
func (s *jsStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	bucket := "BG_" + s.cfg.Set + "_pos"
	m, err := s.leader.GetLastMsg("KV_"+bucket, "$KV."+bucket+"."+key, nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", fanout.ErrNotFound, key)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("jetstream: %s: %w", key, err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, fmt.Errorf("%w: %s (deleted)", fanout.ErrNotFound, key)
	}
	return m.Data, m.Sequence, nil
}

func (s *jsStore) Put(ctx context.Context, key string, val []byte) error {
	if _, err := s.pos.Put(ctx, key, val); err != nil {
		return fmt.Errorf("jetstream: %s: %w", key, err)
	}
	return nil
}

func (s *jsStore) CompareAndPut(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	var nrev uint64
	var err error
	if rev == 0 {
		nrev, err = s.pos.Create(ctx, key, val)
	} else {
		nrev, err = s.pos.Update(ctx, key, val, rev)
	}
	switch {
	case err == nil:
		return nrev, nil
	case errors.Is(err, js.ErrKeyExists), wrongLast(err):
		return 0, fmt.Errorf("%w: %s: %v", fanout.ErrConflict, key, err)
	}
	return 0, fmt.Errorf("jetstream: %s: %w", key, err)
}

// PutObject uploads r once the object store answers. Put's first request
// (the object's info) can go unanswered while the store's stream has no
// leader yet — a cluster just formed, a leader moving — and would then
// wait out ctx (the snapshot timeout, a minute) with the upload not
// started: no instance can join meanwhile. So the info is first asked for
// in answered's bounded attempts; an answer that is an error (a permission
// refused, say) fails the upload at once, for the feeder's next snapshot.
func (s *jsStore) PutObject(ctx context.Context, name string, r io.Reader) error {
	if _, err := answered(ctx, func(ctx context.Context) (*js.ObjectInfo, error) {
		info, err := s.objects.GetInfo(ctx, name)
		if errors.Is(err, js.ErrObjectNotFound) {
			err = nil
		}
		return info, err
	}); err != nil {
		return fmt.Errorf("jetstream: object store: %w", err)
	}
	_, err := s.objects.Put(ctx, js.ObjectMeta{Name: name}, r)
	return err
}

// GetObject reads the object's chunks one by one from the object store's
// stream (direct gets by subject), not through a consumer as the client's
// ObjectStore.Get does: an instance then needs no right to create consumers
// on the object store's stream, a right that would let its credentials copy
// the stream's messages into the log (a push consumer delivers to any
// subject its creator names; docs/operations.md).
func (s *jsStore) GetObject(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	info, err := s.objects.GetInfo(ctx, name)
	if errors.Is(err, js.ErrObjectNotFound) {
		return nil, 0, fmt.Errorf("%w: object %s", fanout.ErrNotFound, name)
	}
	if err != nil {
		return nil, 0, err
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, 0, fmt.Errorf("jetstream: object %s is a link", name)
	}
	ctx, cancel := context.WithCancel(ctx)
	return &chunkReader{ctx: ctx, cancel: cancel, stream: s.objStr, subject: "$O.BG_" + s.cfg.Set + "_snap.C." + info.NUID,
		left: info.Chunks, size: info.Size, digest: info.Digest, h: sha256.New(), seq: 1}, int64(info.Size), nil
}

// chunkReadAhead is how many chunk reads a chunkReader keeps in flight: a
// snapshot is many chunks (128 KiB each by default), each a request to
// the server, and the decoder works on one while the next ones arrive.
const chunkReadAhead = 8

// chunkReader reads an object's chunks in order and checks their size and
// digest at the end. It reads ahead: a chunk is the first message on the
// object's subject at or after a sequence, and the chunks of one object
// were put one after the other, so the reads for the sequences after the
// last chunk's are issued before it is known; a read is used only if its
// sequence was indeed the one after the previous chunk's (else the
// pipeline is issued again from there), so the chunks are the same as one
// read at a time would get.
type chunkReader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	stream  js.Stream
	subject string
	left    uint32 // chunks not read yet
	size    uint64
	read    uint64
	digest  string
	h       hash.Hash
	seq     uint64 // where the next chunk's search starts
	buf     []byte
	err     error
	// ahead are the reads in flight, in the order of their sequences.
	ahead []*chunkRead
}

// chunkRead is one read in flight.
type chunkRead struct {
	seq  uint64 // the search's start
	done chan struct{}
	msg  *js.RawStreamMsg
	err  error
}

// fill issues reads up to chunkReadAhead (and no more than the chunks
// left), each at the sequence after the one before.
func (r *chunkReader) fill() {
	next := r.seq
	if n := len(r.ahead); n > 0 {
		next = r.ahead[n-1].seq + 1
	}
	for len(r.ahead) < chunkReadAhead && uint32(len(r.ahead)) < r.left {
		cr := &chunkRead{seq: next, done: make(chan struct{})}
		go func() {
			defer close(cr.done)
			cr.msg, cr.err = r.stream.GetMsg(r.ctx, cr.seq, js.WithGetMsgSubject(r.subject))
		}()
		r.ahead = append(r.ahead, cr)
		next++
	}
}

// next returns the next chunk.
func (r *chunkReader) next() (*js.RawStreamMsg, error) {
	for {
		r.fill()
		cr := r.ahead[0]
		r.ahead = r.ahead[1:]
		if cr.seq != r.seq {
			// Issued on a guess that did not hold (another message sat
			// between two chunks): issue them again from r.seq.
			r.ahead = r.ahead[:0]
			continue
		}
		select {
		case <-cr.done:
		case <-r.ctx.Done():
			return nil, r.ctx.Err()
		}
		return cr.msg, cr.err
	}
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 && r.err == nil {
		if r.left == 0 {
			r.err = io.EOF
			if r.read != r.size || js.GetObjectDigestValue(r.h) != r.digest {
				r.err = fmt.Errorf("jetstream: object %s: %d bytes, digest %s; want %d bytes, %s",
					r.subject, r.read, js.GetObjectDigestValue(r.h), r.size, r.digest)
			}
			break
		}
		m, err := r.next()
		if err != nil {
			r.err = fmt.Errorf("jetstream: object chunk %s after sequence %d: %w", r.subject, r.seq, err)
			break
		}
		r.seq, r.buf = m.Sequence+1, m.Data
		r.h.Write(m.Data)
		r.read += uint64(len(m.Data))
		r.left--
	}
	if len(r.buf) == 0 {
		return 0, r.err
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

var _ fanout.CheckedObject = (*chunkReader)(nil)

// SHA256 returns the digest Read checks at the object's end.
func (r *chunkReader) SHA256() (sum [sha256.Size]byte, ok bool) {
	b, err := js.DecodeObjectDigest(r.digest)
	if err != nil || len(b) != len(sum) || !strings.HasPrefix(r.digest, "SHA-256=") {
		return sum, false
	}
	return [sha256.Size]byte(b), true
}

// Close cancels the reads in flight.
func (r *chunkReader) Close() error {
	r.cancel()
	return nil
}

func (s *jsStore) Objects(ctx context.Context) ([]string, error) {
	infos, err := s.objects.List(ctx)
	if errors.Is(err, js.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(infos))
	for _, o := range infos {
		names = append(names, o.Name)
	}
	return names, nil
}

func (s *jsStore) DeleteObject(ctx context.Context, name string) error {
	return s.objects.Delete(ctx, name)
}
