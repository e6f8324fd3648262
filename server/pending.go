package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/serve"
)

// A set is declared in the keyspace before its source, change feed and
// fan-out are connected (Listen serves at once, and a set name unknown to
// the keyspace would be answered "absent"). Until they are, the set's
// gate is not ready and answers "maybe": its Source, Keeper, Confirmer and
// expiring Source and Feed are the pendingSet's stand-ins, which wait for
// the connections and then pass every call through.

// pendingSet is one set's connections, filled in by the background start.
type pendingSet struct {
	name string
	// opened is closed once the fields below are set (and never, when
	// the start fails: the stand-ins wait for their ctx then).
	opened chan struct{}
	src    *openedSource
	keeper serve.Keeper
	expFd  serve.ExpiringFeed
	// role is the set's role before it is connected (Keeper.Role must not
	// block).
	role serve.Role
	// early, for a set that follows PostgreSQL in this process and keeps
	// its snapshots in the data directory, is its FollowConfig: Follow
	// starts at once over a pendingFeed, loading the snapshot while the
	// database is being connected and checked.
	early *bloomgate.FollowConfig
}

func newPendingSet(s *SetConfig, dataDir string) *pendingSet {
	p := &pendingSet{name: s.Name, opened: make(chan struct{}), role: serve.RoleFollower}
	if _, fanned := transports[s.Fanout.Transport]; !fanned && dataDir != "" && !s.expiring() &&
		s.follows() && s.Source.Driver == SourcePostgres {
		fc := followConfig(s, dataDir)
		p.early = &fc
	}
	if _, fanned := transports[s.Fanout.Transport]; fanned {
		p.role = serve.RoleInstance
		if s.Source.Driver == SourcePostgres && s.feeder() {
			p.role = serve.RoleStandby
		}
	}
	return p
}

// errNotConnected answers an exact lookup (the confirm query) asked before
// the set's database connection is open.
var errNotConnected = errors.New("the database connection is not open yet (the server is starting)")

func (p *pendingSet) wait(ctx context.Context) error {
	select {
	case <-p.opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pendingSet) isOpen() bool {
	select {
	case <-p.opened:
		return true
	default:
		return false
	}
}

// pendingSource stands in for a set's bloomgate.Source.
type pendingSource struct{ p *pendingSet }

func (s pendingSource) Scan(ctx context.Context, fn func([]byte) error) error {
	if err := s.p.wait(ctx); err != nil {
		return err
	}
	return s.p.src.source.Scan(ctx, fn)
}

func (s pendingSource) Estimate(ctx context.Context) (int64, error) {
	if err := s.p.wait(ctx); err != nil {
		return 0, err
	}
	return s.p.src.source.Estimate(ctx)
}

// pendingConfirm stands in for a set's confirm query: an exact answer
// needs the database, so before it is connected the lookup fails (an
// error reply), rather than waiting for as long as the start takes.
type pendingConfirm struct{ p *pendingSet }

func (c pendingConfirm) Exists(ctx context.Context, key string) (bool, error) {
	if !c.p.isOpen() {
		return false, fmt.Errorf("set %q: %w", c.p.name, errNotConnected)
	}
	return c.p.src.confirm.Exists(ctx, key)
}

// pendingKeeper stands in for a followed set's Keeper.
type pendingKeeper struct{ p *pendingSet }

func (k pendingKeeper) Run(ctx context.Context, g *bloomgate.Gate) error {
	if k.p.early != nil {
		return g.Follow(ctx, pendingFeed(k), *k.p.early)
	}
	if err := k.p.wait(ctx); err != nil {
		return err
	}
	return k.p.keeper.Run(ctx, g)
}

// pendingFeed stands in for the change feed of a set with an early
// FollowConfig. Follow's first step, loading the newest snapshot from the
// data directory, reads no database, so it runs beside the connection and
// the checks (at 10 M keys each took tens of milliseconds, one after the
// other); every call of the feed waits for them. The loaded filter serves
// as a filter catching up does, not ready ("maybe"), until the stream has
// passed the head the feed reads once it is connected.
type pendingFeed struct{ p *pendingSet }

// errNoFeed is a pendingFeed's keeper that is not a followKeeper: never,
// as newPendingSet and openKeeper decide alike.
var errNoFeed = errors.New("server: the set's keeper has no change feed")

func (f pendingFeed) feed(ctx context.Context) (bloomgate.Feed, error) {
	if err := f.p.wait(ctx); err != nil {
		return nil, err
	}
	k, ok := f.p.keeper.(*followKeeper)
	if !ok || k.feed == nil {
		return nil, fmt.Errorf("set %q: %w", f.p.name, errNoFeed)
	}
	return k.feed, nil
}

func (f pendingFeed) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	fd, err := f.feed(ctx)
	if err != nil {
		return 0, err
	}
	return fd.Bootstrap(ctx, fn)
}

func (f pendingFeed) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	fd, err := f.feed(ctx)
	if err != nil {
		return 0, err
	}
	return fd.Rebuild(ctx, fn)
}

func (f pendingFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	fd, err := f.feed(ctx)
	if err != nil {
		return err
	}
	return fd.Stream(ctx, from, apply)
}

func (f pendingFeed) Head(ctx context.Context) (changefeed.Position, error) {
	fd, err := f.feed(ctx)
	if err != nil {
		return 0, err
	}
	return fd.Head(ctx)
}

func (f pendingFeed) Confirm(ctx context.Context, pos changefeed.Position) error {
	fd, err := f.feed(ctx)
	if err != nil {
		return err
	}
	return fd.Confirm(ctx, pos)
}

// Estimate is the feed's (Follow sizes a bootstrap's filter with it).
func (f pendingFeed) Estimate(ctx context.Context) (int64, error) {
	fd, err := f.feed(ctx)
	if err != nil {
		return 0, err
	}
	if e, ok := fd.(interface {
		Estimate(context.Context) (int64, error)
	}); ok {
		return e.Estimate(ctx)
	}
	return 0, nil
}

// Err is nil while starting (the readiness reason says "starting"), then
// the feed's.
func (f pendingFeed) Err() error {
	if !f.p.isOpen() {
		return nil
	}
	if k, ok := f.p.keeper.(*followKeeper); ok {
		if e, ok := k.feed.(interface{ Err() error }); ok {
			return e.Err()
		}
	}
	return nil
}

func (k pendingKeeper) Role() serve.Role {
	if !k.p.isOpen() {
		return k.p.role
	}
	return k.p.keeper.Role()
}

// pendingExpiringSource stands in for an expiring set's source.
type pendingExpiringSource struct{ p *pendingSet }

func (s pendingExpiringSource) ScanExpiring(ctx context.Context, fn func([]byte, time.Time) error) error {
	if err := s.p.wait(ctx); err != nil {
		return err
	}
	return s.p.src.expiring.ScanExpiring(ctx, fn)
}

// pendingExpiringFeed stands in for a followed expiring set's feed.
type pendingExpiringFeed struct{ p *pendingSet }

func (f pendingExpiringFeed) BootstrapExpiring(ctx context.Context, fn func([]byte, time.Time) error) (changefeed.Position, error) {
	if err := f.p.wait(ctx); err != nil {
		return 0, err
	}
	return f.p.expFd.BootstrapExpiring(ctx, fn)
}

func (f pendingExpiringFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	if err := f.p.wait(ctx); err != nil {
		return err
	}
	return f.p.expFd.Stream(ctx, from, apply)
}

func (f pendingExpiringFeed) Head(ctx context.Context) (changefeed.Position, error) {
	if err := f.p.wait(ctx); err != nil {
		return 0, err
	}
	return f.p.expFd.Head(ctx)
}

func (f pendingExpiringFeed) Confirm(ctx context.Context, pos changefeed.Position) error {
	if err := f.p.wait(ctx); err != nil {
		return err
	}
	return f.p.expFd.Confirm(ctx, pos)
}

// ParseExpiry is called only for what Stream delivered, so after the
// feed is open.
func (f pendingExpiringFeed) ParseExpiry(v []byte) (time.Time, error) {
	if !f.p.isOpen() {
		return time.Time{}, fmt.Errorf("set %q: %w", f.p.name, errNotConnected)
	}
	return f.p.expFd.ParseExpiry(v)
}

// Err is nil while starting: the readiness reason says "starting".
func (f pendingExpiringFeed) Err() error {
	if !f.p.isOpen() {
		return nil
	}
	return f.p.expFd.Err()
}

var (
	_ bloomgate.Source     = pendingSource{}
	_ serve.Confirmer      = pendingConfirm{}
	_ serve.Keeper         = pendingKeeper{}
	_ bloomgate.Feed       = pendingFeed{}
	_ serve.ExpiringSource = pendingExpiringSource{}
	_ serve.ExpiringFeed   = pendingExpiringFeed{}
)

// declaredSets returns the keyspace's declaration of cfg's sets, each with
// the pendingSet's stand-ins in place of its connections.
func declaredSets(cfg *Config, pending []*pendingSet) []serve.SetConfig {
	var sets []serve.SetConfig
	for i := range cfg.Sets {
		s, p := &cfg.Sets[i], pending[i]
		if s.expiring() {
			var feed serve.ExpiringFeed
			if s.follows() && s.Source.Driver == SourcePostgres {
				feed = pendingExpiringFeed{p}
			}
			sets = append(sets, serve.SetConfig{Name: s.Name, Family: s.Family, Expiring: expiringConfig(s, pendingExpiringSource{p}, feed)})
			continue
		}
		sc := setConfig(cfg, s)
		if s.Source.Driver != SourceNone {
			sc.Source = pendingSource{p}
			if s.Source.Confirm != "" {
				sc.Confirm = pendingConfirm{p}
			}
		}
		if s.follows() {
			sc.Keeper = pendingKeeper{p}
		}
		sets = append(sets, sc)
	}
	return sets
}

// setConfig is a bloom or cuckoo set's keyspace config, without its
// source, confirm query and keeper.
func setConfig(cfg *Config, s *SetConfig) serve.SetConfig {
	sc := serve.SetConfig{Name: s.Name, Family: s.family(), FPRate: s.FPRate, Capacity: s.Capacity,
		RebuildInterval: s.RebuildInterval, Registerer: cfg.Registry}
	if s.Normalize == NormalizeLowerTrim {
		sc.Normalizer = bloomgate.LowerTrim
	}
	return sc
}
