// Package demo runs a lookup experiment: a users table, a workload where
// most lookups ask for e-mails that do not exist, measured first straight
// against the database and then through a bloomgate Gate.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

// Config configures a run. The zero value of each field is its default.
type Config struct {
	Users       int           // users in the table; default 1,000,000
	MissRatio   float64       // share of lookups for absent e-mails; default 0.87 (0 means default; use a tiny value for none)
	Duration    time.Duration // per phase; default 10 s
	Concurrency int           // lookup goroutines; default GOMAXPROCS
	FPRate      float64       // gate's target; default 0.001
	Postgres    string        // connection string; empty: embedded SQLite
	SQLitePath  string        // SQLite file; default a temporary file, removed afterwards
	Table       string        // demo table; default bloomgate_demo_users
	Keep        bool          // keep the demo table (and SQLite file)
	Progress    io.Writer     // progress bars; nil: none
}

func (c *Config) fill() error {
	if c.Users == 0 {
		c.Users = 1_000_000
	}
	if c.MissRatio == 0 {
		c.MissRatio = 0.87
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = runtime.GOMAXPROCS(0)
	}
	if c.FPRate == 0 {
		c.FPRate = 0.001
	}
	if c.Table == "" {
		c.Table = "bloomgate_demo_users"
	}
	switch {
	case c.Users < 1 || c.Users > 1e9:
		return fmt.Errorf("users %d outside [1, 1e9]", c.Users)
	case !(c.MissRatio > 0 && c.MissRatio <= 1):
		return fmt.Errorf("miss ratio %v outside (0, 1]", c.MissRatio)
	case c.Duration < 0:
		return fmt.Errorf("negative duration")
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return fmt.Errorf("concurrency %d outside [1, 4096]", c.Concurrency)
	case !(c.FPRate > 0 && c.FPRate < 1):
		return fmt.Errorf("fp rate %v outside (0, 1)", c.FPRate)
	}
	return nil
}

// Phase holds one phase's measurements.
type Phase struct {
	Lookups       int64   `json:"lookups"`
	LookupsPerSec float64 `json:"lookups_per_sec"`
	DBQueries     int64   `json:"db_queries"`
	P50MissUS     float64 `json:"p50_miss_us"`
	P95MissUS     float64 `json:"p95_miss_us"`
	P99MissUS     float64 `json:"p99_miss_us"`
	P50HitUS      float64 `json:"p50_hit_us"`
	P95HitUS      float64 `json:"p95_hit_us"`
	P99HitUS      float64 `json:"p99_hit_us"`
	WrongAnswers  int64   `json:"wrong_answers"` // lookups whose found/absent answer was wrong: must be 0
}

// Result is the whole run.
type Result struct {
	Database            string  `json:"database"`
	Users               int     `json:"users"`
	MissRatio           float64 `json:"miss_ratio"`
	Concurrency         int     `json:"concurrency"`
	DurationSeconds     float64 `json:"duration_seconds"`
	WithoutGate         Phase   `json:"without_gate"`
	WithGate            Phase   `json:"with_gate"`
	QueriesAvoided      int64   `json:"queries_avoided"`
	QueriesAvoidedRatio float64 `json:"queries_avoided_ratio"`
	ObservedFPRate      float64 `json:"observed_fp_rate"`
	ConfiguredFPRate    float64 `json:"configured_fp_rate"`
	WarmSeconds         float64 `json:"warm_seconds"`
	FilterBytes         uint64  `json:"filter_bytes"`
	FilterKeys          uint64  `json:"filter_keys"`
	LoadSeconds         float64 `json:"load_seconds"`
}

// users is what the demo needs of a database.
type users interface {
	Create(ctx context.Context) error
	Load(ctx context.Context, n int, key func(int) string) error
	Find(ctx context.Context, email string) (int64, bool, error)
	Drop(ctx context.Context) error
}

var domains = [...]string{"gmail.com", "yahoo.com", "outlook.com", "example.org", "proton.me", "icloud.com", "web.de", "mail.ru"}

// Email is user i's address. Indices ≥ Users are people who never signed up.
func Email(i int) string {
	return "user" + strconv.Itoa(i) + "@" + domains[uint(i)%uint(len(domains))]
}

// Run runs the demo.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	db, src, name, cleanup, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res := &Result{Database: name, Users: cfg.Users, MissRatio: cfg.MissRatio, Concurrency: cfg.Concurrency,
		DurationSeconds: cfg.Duration.Seconds(), ConfiguredFPRate: cfg.FPRate}

	start := time.Now()
	if err := db.Create(ctx); err != nil {
		return nil, err
	}
	bar := newBar(cfg.Progress, int64(cfg.Users), "loading users")
	err = db.Load(ctx, cfg.Users, func(i int) string {
		if i%8192 == 0 {
			bar.Set64(int64(i))
		}
		return Email(i)
	})
	bar.Finish()
	if err != nil {
		return nil, err
	}
	res.LoadSeconds = time.Since(start).Seconds()

	direct := func(ctx context.Context, email string) (bool, error) {
		_, found, err := db.Find(ctx, email)
		return found, err
	}
	if res.WithoutGate, err = workload(ctx, cfg, "without gate", direct, nil); err != nil {
		return nil, err
	}

	bar = newBar(cfg.Progress, int64(cfg.Users), "warming gate ")
	g, err := bloomgate.New(bloomgate.Config{Source: src, FPRate: cfg.FPRate, OnProgress: func(p bloomgate.Progress) {
		bar.Set64(p.Keys)
	}})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	start = time.Now()
	err = g.Warm(ctx)
	bar.Finish()
	if err != nil {
		return nil, err
	}
	res.WarmSeconds = time.Since(start).Seconds()

	var queries atomic.Int64
	gated := func(ctx context.Context, email string) (bool, error) {
		_, found, err := bloomgate.Lookup(ctx, g, email, func(ctx context.Context) (int64, bool, error) {
			queries.Add(1)
			return db.Find(ctx, email)
		})
		return found, err
	}
	if res.WithGate, err = workload(ctx, cfg, "with gate", gated, &queries); err != nil {
		return nil, err
	}
	st := g.Stats()
	res.ObservedFPRate = st.ObservedFPRate
	res.FilterBytes = st.Filter.Bytes
	res.FilterKeys = st.Filter.Items
	res.QueriesAvoided = res.WithGate.Lookups - res.WithGate.DBQueries
	if res.WithGate.Lookups > 0 {
		res.QueriesAvoidedRatio = float64(res.QueriesAvoided) / float64(res.WithGate.Lookups)
	}
	if res.WithoutGate.WrongAnswers+res.WithGate.WrongAnswers > 0 {
		return res, fmt.Errorf("demo: %d wrong answers (false negatives or phantom rows)", res.WithoutGate.WrongAnswers+res.WithGate.WrongAnswers)
	}
	return res, nil
}

func open(ctx context.Context, cfg Config) (users, bloomgate.Source, string, func(), error) {
	table := cfg.Table
	if cfg.Postgres != "" {
		pool, err := postgres.Connect(ctx, cfg.Postgres)
		if err != nil {
			return nil, nil, "", nil, err
		}
		u := postgres.UsersTable{Pool: pool, Table: table}
		cleanup := func() {
			if !cfg.Keep {
				u.Drop(context.Background())
			}
			pool.Close()
		}
		return u, u.Source(), "postgresql", cleanup, nil
	}
	path, rmDir := cfg.SQLitePath, ""
	if path == "" {
		dir, err := os.MkdirTemp("", "bloomgate-demo")
		if err != nil {
			return nil, nil, "", nil, err
		}
		path, rmDir = filepath.Join(dir, "demo.db"), dir
	}
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, nil, "", nil, err
	}
	db.SetMaxOpenConns(cfg.Concurrency + 2)
	db.SetMaxIdleConns(cfg.Concurrency + 2)
	u := sqlite.UsersTable{DB: db, Table: table}
	cleanup := func() {
		if !cfg.Keep {
			u.Drop(context.Background())
		}
		db.Close()
		if rmDir != "" && !cfg.Keep {
			os.RemoveAll(rmDir)
		}
	}
	return u, u.Source(), "sqlite (" + path + ")", cleanup, nil
}

func newBar(w io.Writer, max int64, desc string) *progressbar.ProgressBar {
	if w == nil {
		return progressbar.DefaultSilent(max)
	}
	return progressbar.NewOptions64(max, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
}

// workload runs lookups for cfg.Duration on cfg.Concurrency goroutines and
// measures them. queries counts database queries if the lookup does not go
// straight to the database (nil: every lookup is one query).
func workload(ctx context.Context, cfg Config, name string, lookup func(context.Context, string) (bool, error), queries *atomic.Int64) (Phase, error) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "running %s for %v on %d goroutines...\n", name, cfg.Duration, cfg.Concurrency)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var mu sync.Mutex
	var firstErr error
	hits, misses := newHist(), newHist()
	var lookups, wrong atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Concurrency {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 42))
			h, m := newHist(), newHist()
			var n, bad int64
			for ctx.Err() == nil {
				miss := r.Float64() < cfg.MissRatio
				var i int
				if miss {
					i = cfg.Users + r.IntN(10*cfg.Users)
				} else {
					i = r.IntN(cfg.Users)
				}
				email := Email(i)
				t0 := time.Now()
				found, err := lookup(ctx, email)
				d := time.Since(t0)
				if err != nil {
					if ctx.Err() != nil {
						break // the phase ended mid-query
					}
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					cancel()
					break
				}
				n++
				if found == miss {
					bad++
				}
				if miss {
					m.RecordValue(d.Nanoseconds())
				} else {
					h.RecordValue(d.Nanoseconds())
				}
			}
			mu.Lock()
			hits.Merge(h)
			misses.Merge(m)
			mu.Unlock()
			lookups.Add(n)
			wrong.Add(bad)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Phase{}, fmt.Errorf("demo: %s: %w", name, firstErr)
	}
	p := Phase{Lookups: lookups.Load(), WrongAnswers: wrong.Load()}
	p.LookupsPerSec = float64(p.Lookups) / elapsed.Seconds()
	p.DBQueries = p.Lookups
	if queries != nil {
		p.DBQueries = queries.Load()
	}
	us := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	p.P50MissUS, p.P95MissUS, p.P99MissUS = us(misses, 50), us(misses, 95), us(misses, 99)
	p.P50HitUS, p.P95HitUS, p.P99HitUS = us(hits, 50), us(hits, 95), us(hits, 99)
	return p, nil
}

func cmpErr(first, err error) error {
	if first != nil || errors.Is(err, context.Canceled) {
		return first
	}
	return err
}

// newHist records 1 ns to 100 s with 3 significant digits.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 100e9, 3) }
