package bloomgate

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/atomicfile"
)

// ChangeFeed is what a Follower needs of a change feed: the table's keys as
// of a position, then every committed transaction after it, in order.
// source/postgres.Feed implements it.
type ChangeFeed interface {
	// Bootstrap delivers every key committed before the returned position,
	// exactly once.
	Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error)
	// Stream delivers the transactions after from, in order, until ctx is
	// done or it fails; an error wrapping changefeed.ErrRebuild means from
	// can no longer be continued.
	Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error
	// Confirm tells the feed that the state at p is durable.
	Confirm(ctx context.Context, p changefeed.Position) error
	// Fresh reports whether a Stream is running and has delivered every
	// transaction committed before it (re)connected, and recently enough.
	// Until it does the gate fails open. (source/postgres.Feed: Health's
	// Degraded is false.)
	Fresh() bool
}

// FollowConfig configures NewFollower. The zero value of every field but
// Feed means its default.
type FollowConfig struct {
	// Feed is the change feed of the gate's table. Required.
	Feed ChangeFeed
	// SnapshotPath is the file holding the newest snapshot: the filter and
	// the feed position it reflects. Default "": no snapshots, every start
	// bootstraps, and every applied position is confirmed at once (as it
	// is with a filter that cannot be written, lacking WriteTo).
	SnapshotPath string
	// SnapshotInterval is the least time between two snapshots while
	// streaming. Default: 1 minute.
	SnapshotInterval time.Duration
	// Fingerprint names the key set (say "db/public.users/email/exact"). A
	// snapshot written under another fingerprint is skipped. Change it when
	// the table, the column or the Normalizer changes. Default "".
	Fingerprint string
}

// DefaultSnapshotInterval is FollowConfig.SnapshotInterval's default.
const DefaultSnapshotInterval = time.Minute

// Follower keeps a Gate in step with a change feed: every row any writer
// commits reaches the filter, not only the application's Adds, and a restart
// resumes from the newest snapshot instead of rebuilding.
//
// While following, deletes come from the feed: the application must not
// call Gate.Remove too (a key removed twice could make another key a false
// negative in a counting or cuckoo filter), nor Gate.Run or Gate.Rebuild,
// which would bootstrap the feed's slot while it streams. Unknown deletes
// and truncations count toward Stats' unhonoured removes; this version does
// not rebuild on them (it fails open only on feed errors).
type Follower struct {
	g   *Gate
	cfg FollowConfig

	pos      changefeed.Position // last applied End, 0: bootstrap needed
	lastSnap time.Time

	mu       sync.Mutex // guards the fields below (Run and the freshness monitor)
	boot     *bootstrap // the bootstrap in progress, nil outside one
	caught   bool       // this Stream has caught up
	degraded bool       // the Follower degraded the gate; catching up again ends it
	gen      uint64     // bumped when a Stream starts or fails: older Fresh readings are void
}

// freshnessEvery is how often a Follower polls the feed's Fresh.
const freshnessEvery = 100 * time.Millisecond

// bootstrap connects a build's scan (which runs the feed's Bootstrap) with
// the stream that must catch up before the build publishes its filter.
type bootstrap struct {
	pos    chan changefeed.Position // the Bootstrap's position, once
	caught chan struct{}            // closed when the stream has caught up
	done   chan struct{}            // closed when the stream ended
	once   sync.Once
}

// feedSource is the Source of a following gate's builds: the feed's
// Bootstrap, and the application's Source (if any) for the estimate.
type feedSource struct {
	fl  *Follower
	est Source
}

func (s feedSource) Estimate(ctx context.Context) (int64, error) {
	if s.est == nil {
		return 0, nil
	}
	return s.est.Estimate(ctx)
}

// Scan bootstraps the feed into the filter being built, then waits until the
// stream from the bootstrap position has caught up, so that the build
// publishes a filter that misses no committed row.
func (s feedSource) Scan(ctx context.Context, fn func(key []byte) error) error {
	b := s.fl.boot
	p, err := s.fl.cfg.Feed.Bootstrap(ctx, fn)
	if err != nil {
		return fmt.Errorf("change feed bootstrap: %w", err)
	}
	b.pos <- p
	select {
	case <-b.caught:
		return nil
	case <-b.done:
		return errors.New("change feed ended before catching up")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewFollower returns a gate that follows fc.Feed, and its Follower; call
// Follower.Run. cfg.Source may be nil: builds read the keys through the
// feed's Bootstrap, and a Source given is used only for its Estimate.
//
// If fc.SnapshotPath holds a valid snapshot (checksums, version,
// fingerprint and filter kind match), the gate starts with its filter,
// failing open until Run has caught up from the snapshot's position. An
// invalid or mismatched snapshot is skipped with a logged reason.
func NewFollower(cfg Config, fc FollowConfig) (*Gate, *Follower, error) {
	if fc.Feed == nil {
		return nil, nil, fmt.Errorf("%w: FollowConfig.Feed is required", ErrInvalidConfig)
	}
	setDefault(&fc.SnapshotInterval, DefaultSnapshotInterval)
	fl := &Follower{cfg: fc}
	cfg.Source = feedSource{fl: fl, est: cfg.Source}
	g, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	fl.g = g
	if fc.SnapshotPath != "" {
		if err := fl.load(); err != nil {
			g.cfg.Logger.Warn("bloomgate: snapshot skipped; bootstrapping from the feed", "path", fc.SnapshotPath, "reason", err)
		}
	}
	return g, fl, nil
}

// Run follows the feed until ctx is done: it bootstraps when there is no
// usable snapshot, streams, writes snapshots (confirming each position to the
// feed only once its snapshot is durable), and on feed errors fails open,
// waits, and resumes — bootstrapping again when the feed reports
// changefeed.ErrRebuild. On return it writes a last snapshot. It returns
// ctx's error.
func (fl *Follower) Run(ctx context.Context) error {
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { fl.monitor(mctx) })
	defer wg.Wait()
	defer cancel()
	backoff := time.Second
	for {
		err := fl.once(ctx)
		if ctx.Err() != nil {
			fl.mu.Lock()
			caught := fl.caught
			fl.mu.Unlock()
			if caught {
				fl.snapshot(context.WithoutCancel(ctx))
			}
			return ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		if errors.Is(err, changefeed.ErrRebuild) {
			fl.pos = 0
		}
		fl.mu.Lock()
		fl.g.Degrade(fmt.Sprintf("change feed: %v", err))
		fl.degraded, fl.caught = true, false
		fl.gen++
		fl.mu.Unlock()
		fl.g.cfg.Logger.Warn("bloomgate: change feed failed; failing open", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// monitor follows the feed's freshness: fresh means caught up; stale after
// having caught up means failing open until fresh again.
func (fl *Follower) monitor(ctx context.Context) {
	t := time.NewTicker(freshnessEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fl.mu.Lock()
		gen := fl.gen
		fl.mu.Unlock()
		if fl.cfg.Feed.Fresh() {
			fl.caughtUp(gen)
			continue
		}
		fl.mu.Lock()
		fl.g.mu.Lock()
		building := fl.g.pending != nil // its finish would publish over a degrade
		fl.g.mu.Unlock()
		if fl.caught && fl.boot == nil && !building {
			fl.g.Degrade("change feed lagging or disconnected")
			fl.degraded, fl.caught = true, false
		}
		fl.mu.Unlock()
	}
}

// once runs one Stream, preceded by a bootstrap build when needed.
func (fl *Follower) once(ctx context.Context) error {
	fl.mu.Lock()
	fl.caught = false
	fl.gen++
	fl.mu.Unlock()
	if fl.pos != 0 {
		return fl.cfg.Feed.Stream(ctx, fl.pos, fl.apply)
	}
	b := &bootstrap{pos: make(chan changefeed.Position, 1), caught: make(chan struct{}), done: make(chan struct{})}
	fl.mu.Lock()
	fl.boot = b
	fl.mu.Unlock()
	defer func() {
		fl.mu.Lock()
		fl.boot = nil
		fl.mu.Unlock()
	}()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	built := make(chan error, 1)
	go func() {
		err := fl.g.build(sctx, fl.g.buildKind())
		if err != nil {
			cancel() // a stream feeding a failed build is of no use
		}
		built <- err
	}()
	var from changefeed.Position
	select {
	case from = <-b.pos:
	case err := <-built:
		return err
	}
	fl.pos = from
	err := fl.cfg.Feed.Stream(sctx, from, fl.apply)
	close(b.done)
	cancel()
	if berr := <-built; berr != nil {
		fl.pos = 0 // no filter holds the bootstrap: do it again
		return berr
	}
	return err
}

// apply is the Stream callback: one committed transaction, in order.
func (fl *Follower) apply(t changefeed.Txn) error {
	g := fl.g
	for _, c := range t.Changes {
		switch c.Kind {
		case changefeed.Insert:
			switch err := g.Add(c.Key); {
			case err == nil, errors.Is(err, ErrKeyTooLong): // too long: always "maybe"
			case errors.Is(err, ErrClosed):
				return err
			default:
				// The filter refused the key and the gate fails open:
				// only a new, larger filter can hold it.
				return fmt.Errorf("%w: %w", changefeed.ErrRebuild, err)
			}
		case changefeed.Delete:
			// Unsupported or deferred removes only cost false positives and
			// are counted by the gate; a miss is counted too.
			g.Remove(c.Key)
		case changefeed.UnknownDelete, changefeed.Truncate:
			g.mu.Lock()
			g.unhonoured++
			g.mu.Unlock()
		}
	}
	fl.pos = t.End
	fl.mu.Lock()
	caught := fl.caught
	fl.mu.Unlock()
	_, canWrite := g.view.Load().f.(io.WriterTo)
	switch {
	case fl.cfg.SnapshotPath == "" || !canWrite:
		// No snapshot to resume from: the next start bootstraps anyway, so
		// the applied position may be released at once, and the slot holds
		// no WAL for it.
		return fl.cfg.Feed.Confirm(context.Background(), t.End)
	case caught && time.Since(fl.lastSnap) >= fl.cfg.SnapshotInterval:
		fl.snapshot(context.Background())
	}
	return nil
}

// caughtUp lets a bootstrap build publish its filter, or makes a gate
// started from a snapshot, or degraded by the Follower, ready — unless a
// Stream started or failed since the feed was found fresh (generation gen).
func (fl *Follower) caughtUp(gen uint64) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if gen != fl.gen {
		return
	}
	fl.caught = true
	if b := fl.boot; b != nil {
		b.once.Do(func() { close(b.caught) })
		fl.boot, fl.degraded = nil, false
		return // the build publishes a ready filter
	}
	g := fl.g
	g.mu.Lock()
	defer g.mu.Unlock()
	v := g.view.Load()
	if v.f != nil && g.pending == nil && (v.state == StateWarming || v.state == StateDegraded && fl.degraded) {
		g.setStateLocked(StateReady, "")
	}
	fl.degraded = false
}

// Snapshot format, version 1, little-endian:
//
//	0      4  magic "BGS\x00"
//	4      2  version (1)
//	6      2  F = fingerprint length
//	8      F  fingerprint
//	8+F    8  position
//	16+F   4  CRC-32C of the bytes before it
//	20+F   …  the filter in the filter package's format (its own checksum)
const snapshotVersion = 1

var (
	snapshotMagic = [4]byte{'B', 'G', 'S', 0}
	snapshotCRC   = crc32.MakeTable(crc32.Castagnoli)
	// ErrSnapshot reports a snapshot file that cannot be used.
	ErrSnapshot = errors.New("bloomgate: unusable snapshot")
)

// snapshot writes the serving filter and the position it reflects, and
// confirms the position to the feed once the file is durable. It runs
// between transactions, so the filter holds exactly the changes up to the
// position (plus the application's Adds, which only add).
func (fl *Follower) snapshot(ctx context.Context) {
	g := fl.g
	v := g.view.Load()
	wt, ok := v.f.(io.WriterTo)
	if fl.cfg.SnapshotPath == "" || fl.pos == 0 || !ok || v.state != StateReady {
		return
	}
	pos := fl.pos
	fl.lastSnap = time.Now()
	err := atomicfile.Write(fl.cfg.SnapshotPath, 0o644, func(w io.Writer) error {
		hdr := append(snapshotMagic[:0:0], snapshotMagic[:]...)
		hdr = binary.LittleEndian.AppendUint16(hdr, snapshotVersion)
		hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(fl.cfg.Fingerprint)))
		hdr = append(hdr, fl.cfg.Fingerprint...)
		hdr = binary.LittleEndian.AppendUint64(hdr, uint64(pos))
		hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, snapshotCRC))
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		_, err := wt.WriteTo(w)
		return err
	})
	if err != nil {
		g.cfg.Logger.Warn("bloomgate: snapshot failed", "path", fl.cfg.SnapshotPath, "err", err)
		return
	}
	if err := fl.cfg.Feed.Confirm(ctx, pos); err != nil {
		g.cfg.Logger.Warn("bloomgate: confirming the snapshot position failed", "pos", pos, "err", err)
	}
}

// load starts the gate from the snapshot file, if it is valid.
func (fl *Follower) load() error {
	file, err := os.Open(fl.cfg.SnapshotPath)
	if err != nil {
		return err
	}
	defer file.Close()
	r := bufio.NewReaderSize(file, 1<<20)
	pos, err := readSnapshotHeader(r, fl.cfg.Fingerprint)
	if err != nil {
		return err
	}
	ff, err := filter.Decode(r, filter.DecodeConfig{})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	f, ok := ff.(Filter)
	if !ok {
		return fmt.Errorf("%w: a %T cannot serve a gate", ErrSnapshot, ff)
	}
	g := fl.g
	probe, err := g.cfg.NewFilter(1024, g.cfg.FPRate, f.Seed())
	if err != nil {
		return err
	}
	if fmt.Sprintf("%T", probe) != fmt.Sprintf("%T", f) {
		return fmt.Errorf("%w: holds a %T, the gate builds %T", ErrSnapshot, f, probe)
	}
	// Nobody holds the gate yet: its seed can still change.
	g.seed = f.Seed()
	nv := &view{state: StateWarming, reason: "catching up from snapshot at " + pos.String(), f: f, builtAt: g.cfg.Now()}
	nv.rm, _ = f.(Remover)
	g.view.Store(nv)
	fl.pos = pos
	g.cfg.Logger.Info("bloomgate: loaded snapshot", "path", fl.cfg.SnapshotPath, "pos", pos) // no Stats: it reads the whole filter
	return nil
}

func readSnapshotHeader(r io.Reader, fingerprint string) (changefeed.Position, error) {
	var fixed [8]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return 0, fmt.Errorf("%w: header: %w", ErrSnapshot, err)
	}
	if [4]byte(fixed[:4]) != snapshotMagic {
		return 0, fmt.Errorf("%w: not a snapshot", ErrSnapshot)
	}
	if v := binary.LittleEndian.Uint16(fixed[4:]); v != snapshotVersion {
		return 0, fmt.Errorf("%w: version %d, want %d", ErrSnapshot, v, snapshotVersion)
	}
	rest := make([]byte, int(binary.LittleEndian.Uint16(fixed[6:]))+12)
	if _, err := io.ReadFull(r, rest); err != nil {
		return 0, fmt.Errorf("%w: header: %w", ErrSnapshot, err)
	}
	n := len(rest) - 4
	if crc32.Update(crc32.Checksum(fixed[:], snapshotCRC), snapshotCRC, rest[:n]) != binary.LittleEndian.Uint32(rest[n:]) {
		return 0, fmt.Errorf("%w: header checksum mismatch", ErrSnapshot)
	}
	if fp := string(rest[:n-8]); fp != fingerprint {
		return 0, fmt.Errorf("%w: fingerprint %q, want %q", ErrSnapshot, fp, fingerprint)
	}
	return changefeed.Position(binary.LittleEndian.Uint64(rest[n-8 : n])), nil
}
