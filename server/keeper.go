package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/serve"
)

// This file is the one place where serve's table-backed sets meet the
// change feed (a source's feed, Gate.Follow) and the fan-out (a registered
// transport's fanout.Backend): serve itself sees only its Keeper interface.

// openKeeper returns the Keeper of a followed set, after checking, within
// the set's connect timeout, that its servers allow what the config asks:
// wal_level, the publication, the transport. Every error names the set's
// key it comes from. The returned closers release the connections; they
// are returned with an error too.
func openKeeper(ctx context.Context, s *SetConfig, src *openedSource, tr *earlyTransport, sc serve.SetConfig, dataDir string, log *slog.Logger) (serve.Keeper, []func(), error) {
	var closers []func()
	follow := followConfig(s, "")
	var local bloomgate.SnapshotStore
	if dataDir != "" {
		local = bloomgate.DirSnapshots(filepath.Join(dataDir, "sets", s.Name))
	}
	_, fanned := transports[s.Fanout.Transport]

	var feed bloomgate.Feed
	if src != nil && src.feed != nil && (!fanned || s.feeder()) {
		f, closeFeed, err := src.feed(ctx)
		closers = append(closers, closeFeed)
		if err != nil {
			if tr != nil {
				_, cs, _ := tr.get()
				closers = append(closers, cs...)
			}
			return nil, closers, err
		}
		feed = f
	}
	if !fanned {
		if local != nil {
			follow.Snapshots = local
		}
		return &followKeeper{feed: feed, cfg: follow}, closers, nil
	}

	// A fanned-out set: every process is an instance of the stream; one
	// with database credentials may also become the feeder.
	k := &fanoutKeeper{follow: follow, log: log}
	var feederGate *bloomgate.Gate
	var err error
	if feed != nil {
		feederGate, err = bloomgate.New(sc.GateConfig(log.With("gate", "feeder")))
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: %w", s.Name, err)
		}
		closers = append(closers, func() { feederGate.Close() })
	}
	backend, cs, err := tr.get()
	closers = append(closers, cs...)
	if err != nil {
		return nil, closers, err
	}
	inst, err := fanout.NewInstance(backend, fanout.InstanceConfig{Local: local})
	if err != nil {
		return nil, closers, fmt.Errorf("set %q: %w", s.Name, err)
	}
	k.instance, k.snaps = inst, inst.Snapshots()
	if feederGate != nil {
		fol, err := feederGate.Follower(follow)
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: %w", s.Name, err)
		}
		f, err := fanout.NewFeeder(backend, fanout.FeederConfig{Feed: feed, Gate: fol})
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: %w", s.Name, err)
		}
		k.feeder = f
	}
	if feed != nil {
		// The instance's freshness comes from the database's own head where
		// this process can read it: the feeder's heartbeat is a position
		// read up to a heartbeat earlier, and a dead feeder's stays put, so
		// an instance that marks it "now" overstates its freshness by the
		// heartbeat's age (up to HeadTimeout, 5 s, during a takeover).
		dh := dbHead{Feed: k.instance, db: feed}
		k.instance = dh
		if gens, ok := dh.Feed.(instanceGenerations); ok {
			k.instance = dbHeadGenerations{dh, gens}
		}
	}
	return k, closers, nil
}

// followConfig is a followed set's FollowConfig, with the snapshots in
// dataDir ("": none; a fanned-out set's are its instance's).
func followConfig(s *SetConfig, dataDir string) bloomgate.FollowConfig {
	cfg := bloomgate.FollowConfig{
		Identity:         "serve:" + s.Name + ":" + s.Source.Table + "." + s.Source.Column,
		SnapshotInterval: s.Feed.SnapshotInterval,
		MaxLag:           s.Feed.MaxLag,
	}
	if dataDir != "" {
		cfg.Snapshots = bloomgate.DirSnapshots(filepath.Join(dataDir, "sets", s.Name))
	}
	return cfg
}

// earlyTransport is a fanned-out set's transport being opened beside its
// source and change feed (they are independent; each is round trips to
// its own server).
type earlyTransport struct {
	done    chan struct{}
	backend fanout.Backend
	closers []func()
	err     error
}

// startTransport starts opening the set's fan-out transport, within the
// set's connect timeout; nil for a set that is not fanned out.
func startTransport(ctx context.Context, s *SetConfig, log *slog.Logger) *earlyTransport {
	td, fanned := transports[s.Fanout.Transport]
	if !fanned || !s.follows() {
		return nil
	}
	t := &earlyTransport{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		key, err := fanoutKey(s, log)
		if err != nil {
			t.err = err
			return
		}
		cctx, cancel := context.WithTimeout(ctx, s.connectTimeout())
		defer cancel()
		t.backend, t.closers, t.err = td.open(cctx, s, key, log)
	}()
	return t
}

// get waits for the transport; closers release it, also with an error.
func (t *earlyTransport) get() (fanout.Backend, []func(), error) {
	<-t.done
	return t.backend, t.closers, t.err
}

// minFanoutKey is the shortest key the fan-out takes (fanout Config.Key).
const minFanoutKey = 16

// fanoutKey returns the set's fan-out MAC key: FanoutConfig.Key, else read
// from KeyFile, else nil. The file's bytes are the key, less one trailing
// newline (so `openssl rand -hex 32 > key` works); every process of the set
// must read the same bytes. A file others can read is logged: the key is
// what tells the feeder's messages from a forger's.
func fanoutKey(s *SetConfig, log *slog.Logger) ([]byte, error) {
	if len(s.Fanout.Key) > 0 {
		if len(s.Fanout.Key) < minFanoutKey {
			return nil, fmt.Errorf("set %q: fanout key: %d bytes; the key must be at least %d", s.Name, len(s.Fanout.Key), minFanoutKey)
		}
		return s.Fanout.Key, nil
	}
	file := s.Fanout.KeyFile
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("set %q: fanout-key-file: %w", s.Name, err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < minFanoutKey {
		return nil, fmt.Errorf("set %q: fanout-key-file: %s holds %d bytes; the key must be at least %d (such as the output of openssl rand -hex 32)",
			s.Name, file, len(b), minFanoutKey)
	}
	if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o004 != 0 {
		log.Warn("fanout-key-file is readable by every user of this machine; chmod 600 it", "set", s.Name, "file", file)
	}
	return b, nil
}

// dbHead is a fan-out instance whose Head is the database's.
type dbHead struct {
	bloomgate.Feed
	db bloomgate.Feed
}

func (d dbHead) Head(ctx context.Context) (changefeed.Position, error) { return d.db.Head(ctx) }

// SnapshotOnly is the instance's: Follow never starts a rebuild from it
// (it holds no database snapshot; its new filters are the feeder's).
func (d dbHead) SnapshotOnly() bool {
	so, ok := d.Feed.(interface{ SnapshotOnly() bool })
	return ok && so.SnapshotOnly()
}

// instanceGenerations is a fan-out instance's: the feeder's newer filters,
// swapped in beside the stream, and the generation served.
type instanceGenerations interface {
	bloomgate.Generations
	Generation() uint64
}

// dbHeadGenerations is a dbHead that keeps its instance's Generations, so
// that Follow swaps in the feeder's newer filters without failing open.
type dbHeadGenerations struct {
	dbHead
	instanceGenerations
}

// timeoutHint turns a deadline error into one that says which bound hit.
func timeoutHint(err error, ctx context.Context, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %v (connect-timeout): %w", timeout, err)
	}
	return err
}

// followKeeper follows the database's change feed in this process.
type followKeeper struct {
	feed bloomgate.Feed
	cfg  bloomgate.FollowConfig
}

func (k *followKeeper) Run(ctx context.Context, g *bloomgate.Gate) error {
	return g.Follow(ctx, k.feed, k.cfg)
}

func (k *followKeeper) Role() serve.Role { return serve.RoleFollower }

// fanoutKeeper serves a set as an instance of its stream and, with a
// feeder, competes for the feeder's lease.
type fanoutKeeper struct {
	instance bloomgate.Feed
	snaps    bloomgate.SnapshotStore
	follow   bloomgate.FollowConfig
	feeder   *fanout.Feeder // nil: instance only
	log      *slog.Logger
}

func (k *fanoutKeeper) Run(ctx context.Context, g *bloomgate.Gate) error {
	var wg sync.WaitGroup
	if k.feeder != nil {
		wg.Go(func() {
			for {
				err := k.feeder.Run(ctx)
				if ctx.Err() != nil || errors.Is(err, bloomgate.ErrClosed) {
					return
				}
				k.log.Error("bloomgate: feeder stopped; starting it again", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		})
	}
	cfg := k.follow
	cfg.Snapshots = k.snaps
	err := g.Follow(ctx, k.instance, cfg)
	wg.Wait()
	return err
}

// Role: the feeder while this process's feeder holds the lease, else
// standby, or instance without a feeder.
func (k *fanoutKeeper) Role() serve.Role {
	switch {
	case k.feeder == nil:
		return serve.RoleInstance
	case k.feeder.Leading():
		return serve.RoleFeeder
	}
	return serve.RoleStandby
}
