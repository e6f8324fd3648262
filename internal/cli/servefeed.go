package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/fanout/redisstream"
	"github.com/bloomgate/bloomgate/internal/version"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// This file is the one place where serve's table-backed sets meet the
// change feed (source/postgres.Feed, Gate.Follow) and the fan-out
// (fanout/jetstream, fanout/redisstream): serve itself sees only its Keeper
// interface.

// openKeeper returns the Keeper of a followed set, after checking, within
// the set's connect-timeout, that its servers allow what the config asks:
// wal_level, the publication, NATS with JetStream, Redis. Every error names
// the set's key it comes from. The returned closers release the
// connections; they are returned with an error too.
func openKeeper(ctx context.Context, d setDecl, sc serve.SetConfig, dataDir string, log *slog.Logger) (serve.Keeper, []func(), error) {
	var closers []func()
	timeout := orDefault(d.ConnectTimeout, defaultConnectTimeout)
	follow := bloomgate.FollowConfig{
		Identity:         "serve:" + d.Name + ":" + d.Table + "." + d.Column,
		SnapshotInterval: d.SnapshotInterval,
		MaxLag:           d.MaxLag,
	}
	var local bloomgate.SnapshotStore
	if dataDir != "" {
		local = bloomgate.DirSnapshots(filepath.Join(dataDir, "sets", d.Name))
	}

	var feed *postgres.Feed
	if d.Postgres != "" && (d.Fanout == "" || d.feeder()) {
		var err error
		feed, err = openFeed(ctx, d, timeout, log)
		if err != nil {
			return nil, closers, err
		}
		closers = append(closers, func() { feed.Close() })
	}
	if d.Fanout == "" {
		if local != nil {
			follow.Snapshots = local
		}
		return &followKeeper{feed: feed, cfg: follow}, closers, nil
	}

	// A fanned-out set: every process is an instance of the stream; one
	// with database credentials may also become the feeder.
	key, err := readFanoutKey(d, log)
	if err != nil {
		return nil, closers, err
	}
	k := &fanoutKeeper{follow: follow, log: log}
	var feederGate *bloomgate.Gate
	if feed != nil {
		var err error
		feederGate, err = bloomgate.New(sc.GateConfig(log.With("gate", "feeder")))
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: %w", d.Name, err)
		}
		closers = append(closers, func() { feederGate.Close() })
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch d.Fanout {
	case "jetstream":
		conn, err := jetstream.Dial(cctx, jetstream.DialConfig{
			URLs: splitList(d.NATS.URLs), Creds: d.NATS.Creds, NKey: d.NATS.NKey,
			User: d.NATS.User, Password: d.NATS.Password, Token: d.NATS.Token,
			TLSCA: d.NATS.TLSCA, TLSCert: d.NATS.TLSCert, TLSKey: d.NATS.TLSKey,
			Timeout: timeout, Name: "bloomgate serve " + d.Name,
		})
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: nats: %w", d.Name, timeoutHint(err, cctx, timeout))
		}
		closers = append(closers, conn.Close)
		set, err := jetstream.Open(cctx, jetstream.Config{JetStream: conn.JetStream(), Set: d.Name,
			Replicas: d.Replicas, LeaseTTL: d.LeaseTTL, Key: key, Logger: log})
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: nats: %w", d.Name, timeoutHint(err, cctx, timeout))
		}
		inst, err := set.NewInstance(jetstream.InstanceConfig{Local: local})
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: %w", d.Name, err)
		}
		k.instance, k.snaps = inst, inst.Snapshots()
		if feederGate != nil {
			f, err := set.NewFeeder(jetstream.FeederConfig{Feed: feed, Gate: feederGate, Follow: follow})
			if err != nil {
				return nil, closers, fmt.Errorf("set %q: %w", d.Name, err)
			}
			k.feeder = f
		}
	case "redis":
		client, err := redisstream.Dial(cctx, d.Redis, timeout)
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: redis: %w", d.Name, timeoutHint(err, cctx, timeout))
		}
		closers = append(closers, func() { client.Close() })
		set, err := redisstream.Open(cctx, redisstream.Config{Client: client, Set: d.Name, LeaseTTL: d.LeaseTTL,
			WaitReplicas: d.Replicas, Key: key, Logger: log})
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: redis: %w", d.Name, timeoutHint(err, cctx, timeout))
		}
		inst, err := set.NewInstance(redisstream.InstanceConfig{Local: local})
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: %w", d.Name, err)
		}
		k.instance, k.snaps = inst, inst.Snapshots()
		if feederGate != nil {
			f, err := set.NewFeeder(redisstream.FeederConfig{Feed: feed, Gate: feederGate, Follow: follow})
			if err != nil {
				return nil, closers, fmt.Errorf("set %q: %w", d.Name, err)
			}
			k.feeder = f
		}
	}
	if feed != nil {
		// The instance's freshness comes from the database's own head where
		// this process can read it: the feeder's heartbeat is a position
		// read up to a heartbeat earlier, and a dead feeder's stays put, so
		// an instance that marks it "now" overstates its freshness by the
		// heartbeat's age (up to HeadTimeout, 5 s, during a takeover).
		k.instance = dbHead{Feed: k.instance, db: feed}
	}
	return k, closers, nil
}

// minFanoutKey is the shortest key the fan-out takes (fanout Config.Key).
const minFanoutKey = 16

// readFanoutKey returns the set's fan-out MAC key from fanout-key-file, or
// nil without one. The file's bytes are the key, less one trailing newline
// (so `openssl rand -hex 32 > key` works); every process of the set must
// read the same bytes. A file others can read is logged: the key is what
// tells the feeder's messages from a forger's.
func readFanoutKey(d setDecl, log *slog.Logger) ([]byte, error) {
	if d.KeyFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(d.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("set %q: fanout-key-file: %w", d.Name, err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < minFanoutKey {
		return nil, fmt.Errorf("set %q: fanout-key-file: %s holds %d bytes; the key must be at least %d (such as the output of openssl rand -hex 32)",
			d.Name, d.KeyFile, len(b), minFanoutKey)
	}
	if fi, err := os.Stat(d.KeyFile); err == nil && fi.Mode().Perm()&0o004 != 0 {
		log.Warn("fanout-key-file is readable by every user of this machine; chmod 600 it", "set", d.Name, "file", d.KeyFile)
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

// openFeed returns the set's PostgreSQL change feed after checking, within
// timeout, that the server answers, that wal_level is logical and that the
// publication covers the table.
func openFeed(ctx context.Context, d setDecl, timeout time.Duration, log *slog.Logger) (*postgres.Feed, error) {
	fc := postgres.FeedConfig{ConnString: d.Postgres, Table: d.Table, Column: d.Column,
		Slot: d.Slot, Publication: d.Publication, Timeout: timeout, Logger: log}
	if d.Kind == "expiring" {
		fc.ValueColumn = d.ExpiresColumn
	}
	feed, err := postgres.NewFeed(fc)
	if err != nil {
		return nil, fmt.Errorf("set %q: postgres: %w", d.Name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	plan, err := feed.Setup(cctx, postgres.SetupOptions{})
	if err != nil && plan.WALLevel != "" && plan.CheckWALLevel() != nil {
		// wal_level is the first thing to fix: say that, not what a
		// publication on this server would need next.
		err = nil
	}
	if err != nil {
		feed.Close()
		return nil, fmt.Errorf("set %q: postgres: %w", d.Name, timeoutHint(err, cctx, timeout))
	}
	// The advice must make the names this set looks for: its slot names
	// its publication too unless publication is given.
	setupCmd := fmt.Sprintf("bloomgate feed setup -postgres URL -table %s -column %s", d.Table, d.Column)
	if d.Slot != "" {
		setupCmd += " -slot " + d.Slot
	}
	if d.Publication != "" {
		setupCmd += " -publication " + d.Publication
	}
	pubName := feed.Publication()
	if d.Slot != "" && d.Publication == "" {
		pubName += " (named after the set's slot; the publication key names another)"
	}
	only, notSeen := "rebuild-only", "rows written by others are not seen until a rebuild"
	if d.Kind == "expiring" {
		only, notSeen = "rescan-only", "rows written without BG.XADD are not seen until a rescan"
	}
	if err := plan.CheckWALLevel(); err != nil {
		feed.Close()
		return nil, fmt.Errorf(`set %q: follow: the change feed needs wal_level = logical, the server has %q: `+
			`run %s to see what to change, or set "follow no" for %s (%s)`,
			d.Name, plan.WALLevel, setupCmd, only, notSeen)
	}
	if len(plan.Statements) > 0 {
		feed.Close()
		return nil, fmt.Errorf(`set %q: publication: %s is missing or does not cover %s: run %s -run `+
			`(as a superuser or the table's owner), or set "follow no" for %s`,
			d.Name, pubName, d.Table, setupCmd, only)
	}
	return feed, nil
}

// timeoutHint turns a deadline error into one that says which bound hit.
func timeoutHint(err error, ctx context.Context, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %v (connect-timeout): %w", timeout, err)
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
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

// setCollector exports each table-backed set's readiness, mode and role
// (the gate's own metrics, labelled set, carry its lag and position), and
// the build. Each scrape reads every set's Status once.
type setCollector struct{ store *serve.Store }

var (
	descSetReady = prometheus.NewDesc("bloomgate_serve_set_ready",
		"1 when the table-backed set answers \"absent\" from its filter; 0 while it fails open.", []string{"set"}, nil)
	descSetRole = prometheus.NewDesc("bloomgate_serve_set_role",
		"1 for this process's role in keeping the set in step: none (rebuild-only), follower, feeder, standby or instance.", []string{"set", "role"}, nil)
	descSetMode = prometheus.NewDesc("bloomgate_serve_set_mode",
		"1 for how the set learns of the table's rows: follow (change feed) or rebuild (rebuild-only).", []string{"set", "mode"}, nil)
	descSetPosition = prometheus.NewDesc("bloomgate_serve_set_position",
		"Change-feed position the set has applied (PostgreSQL LSN as a number); 0 when rebuild-only.", []string{"set"}, nil)
	descSetLag = prometheus.NewDesc("bloomgate_serve_set_lag_seconds",
		"How far the set's applied position is behind the feed's head.", []string{"set"}, nil)
	descBuildInfo = prometheus.NewDesc("bloomgate_serve_build_info",
		"1, labelled with the running build.", []string{"version", "revision", "go_version"}, nil)
)

var allRoles = []serve.Role{serve.RoleNone, serve.RoleFollower, serve.RoleFeeder, serve.RoleStandby, serve.RoleInstance}

func (c setCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSetReady, descSetRole, descSetMode, descSetPosition, descSetLag, descBuildInfo} {
		ch <- d
	}
}

func (c setCollector) Collect(ch chan<- prometheus.Metric) {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, set := range c.store.Sets() {
		st := set.Status()
		name := set.Name()
		ch <- prometheus.MustNewConstMetric(descSetReady, prometheus.GaugeValue, b2f(st.Ready), name)
		for _, r := range allRoles {
			ch <- prometheus.MustNewConstMetric(descSetRole, prometheus.GaugeValue, b2f(r == st.Role), name, r.String())
		}
		for _, m := range []serve.Mode{serve.ModeRebuild, serve.ModeFollow} {
			ch <- prometheus.MustNewConstMetric(descSetMode, prometheus.GaugeValue, b2f(m == st.Mode), name, m.String())
		}
		ch <- prometheus.MustNewConstMetric(descSetPosition, prometheus.GaugeValue, float64(st.Position), name)
		ch <- prometheus.MustNewConstMetric(descSetLag, prometheus.GaugeValue, st.Lag.Seconds(), name)
	}
	for _, name := range c.store.ExpiringSetNames() {
		st, _ := c.store.ExpiringSet(name)
		role, mode := serve.RoleNone, serve.ModeRebuild
		if st.Follow {
			role, mode = serve.RoleFollower, serve.ModeFollow
		}
		ch <- prometheus.MustNewConstMetric(descSetReady, prometheus.GaugeValue, b2f(st.Ready), name)
		for _, r := range allRoles {
			ch <- prometheus.MustNewConstMetric(descSetRole, prometheus.GaugeValue, b2f(r == role), name, r.String())
		}
		for _, m := range []serve.Mode{serve.ModeRebuild, serve.ModeFollow} {
			ch <- prometheus.MustNewConstMetric(descSetMode, prometheus.GaugeValue, b2f(m == mode), name, m.String())
		}
		ch <- prometheus.MustNewConstMetric(descSetPosition, prometheus.GaugeValue, float64(st.Position), name)
		ch <- prometheus.MustNewConstMetric(descSetLag, prometheus.GaugeValue, st.Lag.Seconds(), name)
	}
	v := version.Get()
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, v.Version, v.Revision, v.GoVersion)
}
