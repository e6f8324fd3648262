package cli

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/version"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/serve/httpapi"
	"github.com/bloomgate/bloomgate/serve/resp"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

const serveUsage = `usage: bloomgate serve [-config FILE] [-resp ADDR] [-http ADDR] [-data DIR] [-requirepass PASSWORD] [-appendfsync POLICY]
       bloomgate serve check [-data DIR] [-repair]

Serves filters over the Redis protocol (RedisBloom's BF.* and CF.* commands,
plus BG.EXISTS, BF.EXISTSAT/BG.EXISTSAT for read-your-writes, and BG.X* for
items that expire) and over HTTP (JSON under /v1, /metrics, /healthz,
/readyz). With no config file it serves standalone filters; the config file
declares table-backed sets, which follow PostgreSQL's change feed by default
and may fan out over NATS JetStream or a Redis stream (docs/serve.md
describes its format).

The password also comes from the environment variable BLOOMGATE_PASSWORD.
Flags override the environment, which overrides the config file. Binding a
non-loopback address without a password refuses to start (protected mode).
SIGTERM or SIGINT: stop accepting, finish in-flight commands, snapshot, exit 0.

flags:
`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return runServeCheck(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "config `file` declaring settings and table-backed sets")
	respAddr := fs.String("resp", "127.0.0.1:6380", "Redis protocol listen `address` (\"\" disables it)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "HTTP listen `address` (\"\" disables it)")
	dataDir := fs.String("data", "./bloomgate-data", "`directory` for the snapshot and the log (\"\" keeps filters in memory only)")
	password := fs.String("requirepass", "", "`password` for AUTH and the HTTP bearer token")
	fsync := fs.String("appendfsync", "everysec", "log fsync `policy`: always, everysec or no")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	file := &serveFile{RESP: *respAddr, HTTP: *httpAddr, Data: *dataDir, Fsync: *fsync}
	if *configPath != "" {
		fh, err := os.Open(*configPath)
		if err != nil {
			fmt.Fprintf(stderr, "bloomgate serve: %v\n", err)
			return exitError
		}
		parsed, err := parseServeFile(fh)
		fh.Close()
		if err != nil {
			fmt.Fprintf(stderr, "bloomgate serve: %s: %v\n", *configPath, err)
			return exitError
		}
		file = mergeServeFlags(parsed, set, *respAddr, *httpAddr, *dataDir, *fsync)
	}
	if pw := os.Getenv("BLOOMGATE_PASSWORD"); pw != "" {
		file.Password = pw
	}
	if set["requirepass"] {
		file.Password = *password
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serveMain(ctx, file, log, stdout); err != nil {
		fmt.Fprintf(stderr, "bloomgate serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// mergeServeFlags lets explicitly given flags override the file, and fills
// what the file leaves out from the flags' defaults. A key the file gives
// as "" keeps that value: `http ""` disables HTTP, `data ""` keeps filters
// in memory only, as the flags' "" does.
func mergeServeFlags(f *serveFile, set map[string]bool, respAddr, httpAddr, dataDir, fsync string) *serveFile {
	pick := func(flagName, fileVal, flagVal string) string {
		if set[flagName] || !f.given[flagName] {
			return flagVal
		}
		return fileVal
	}
	f.RESP = pick("resp", f.RESP, respAddr)
	f.HTTP = pick("http", f.HTTP, httpAddr)
	f.Data = pick("data", f.Data, dataDir)
	f.Fsync = pick("appendfsync", f.Fsync, fsync)
	return f
}

// protectedMode refuses a non-loopback address without a password.
func protectedMode(addr, password string) error {
	if addr == "" || password != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without a password (protected mode): set -requirepass or BLOOMGATE_PASSWORD, or bind 127.0.0.1", addr)
}

func serveMain(ctx context.Context, file *serveFile, log *slog.Logger, stdout io.Writer) error {
	for _, addr := range []string{file.RESP, file.HTTP} {
		if err := protectedMode(addr, file.Password); err != nil {
			return err
		}
	}
	var tlsConfig *tls.Config
	if file.TLSCertFile != "" || file.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(file.TLSCertFile, file.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	sets, closeSources, err := openSets(ctx, file.Sets, file.Data, reg, log)
	defer closeSources()
	if err != nil {
		return err
	}
	expiringSets, closeExpiring, err := openExpiringSets(ctx, file.Sets, log)
	defer closeExpiring()
	if err != nil {
		return err
	}
	store, err := serve.Open(serve.Config{
		DataDir:          file.Data,
		Fsync:            serve.Fsync(file.Fsync),
		SnapshotInterval: file.SnapshotInterval,
		MaxMemory:        file.MaxMemory,
		Sets:             sets,
		ExpiringSets:     expiringSets,
		Logger:           log,
	})
	if err != nil {
		return err
	}
	defer store.Close()
	reg.MustRegister(setCollector{store})

	var respSrv *resp.Server
	var httpSrv *http.Server
	errc := make(chan error, 3)
	if file.RESP != "" {
		respSrv, err = resp.New(resp.Config{
			Store: store, Password: file.Password, TLSConfig: tlsConfig, MaxConns: file.MaxClients,
			MaxBulkLen: file.MaxBulkLen, MaxArgs: file.MaxArgs, IdleTimeout: file.Timeout, Logger: log,
			MaxPreAuthConns: file.PreAuthMaxClients, PreAuthTimeout: file.PreAuthTimeout,
			AuthFailureDelay: file.AuthFailureDelay,
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", file.RESP)
		if err != nil {
			return err
		}
		registerServerMetrics(reg, store, respSrv)
		go func() { errc <- respSrv.Serve(ln) }()
		log.Info("serving the Redis protocol", "addr", ln.Addr().String())
	}
	if file.HTTP != "" {
		ln, err := net.Listen("tcp", file.HTTP)
		if err != nil {
			return err
		}
		httpSrv = &http.Server{
			Handler:           httpapi.Handler(httpapi.Config{Store: store, Token: file.Password, Gatherer: reg}),
			ReadHeaderTimeout: orDefault(file.HTTPReadHeaderTimeout, 10*time.Second),
			IdleTimeout:       orDefault(file.HTTPIdleTimeout, 2*time.Minute),
			TLSConfig:         tlsConfig,
			MaxHeaderBytes:    64 << 10,
		}
		go func() {
			if tlsConfig != nil {
				errc <- httpSrv.ServeTLS(ln, "", "")
			} else {
				errc <- httpSrv.Serve(ln)
			}
		}()
		log.Info("serving HTTP", "addr", ln.Addr().String())
	}
	pgSrv, closePG, err := startPostgresFront(ctx, file, store, reg, log, errc)
	defer closePG()
	if err != nil {
		return err
	}
	memCtx, stopMem := context.WithCancel(ctx)
	defer stopMem()
	followMemoryLimit(memCtx, store.UsedMemory, func() int64 {
		if respSrv == nil {
			return 0
		}
		return respSrv.Stats().Connections
	}, file.MaxMemory)
	// "listening" once the listeners are up; "ready" once every set is,
	// when /readyz says 200 (at once without table-backed sets).
	fmt.Fprintln(stdout, "bloomgate serve: listening")
	readyCtx, stopReady := context.WithCancel(ctx)
	readyDone := make(chan struct{})
	defer func() { stopReady(); <-readyDone }()
	go func() {
		defer close(readyDone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for !store.Ready() {
			select {
			case <-readyCtx.Done():
				return
			case <-t.C:
			}
		}
		fmt.Fprintln(stdout, "bloomgate serve: ready")
	}()
	select {
	case <-ctx.Done():
	case err := <-errc:
		log.Error("listener failed", "err", err)
	}
	log.Info("shutting down: finishing in-flight requests, then a snapshot")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if respSrv != nil {
		respSrv.Shutdown(sctx)
	}
	if httpSrv != nil {
		httpSrv.Shutdown(sctx)
	}
	if pgSrv != nil {
		pgSrv.Shutdown(sctx)
	}
	if err := store.Close(); err != nil {
		return fmt.Errorf("final snapshot: %w", err)
	}
	log.Info("stopped")
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// openSets connects the sets' sources, and for followed sets checks their
// change feed and fan-out (see openKeeper). The returned func closes them.
func openSets(ctx context.Context, decls []setDecl, dataDir string, reg prometheus.Registerer, log *slog.Logger) ([]serve.SetConfig, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var out []serve.SetConfig
	for _, d := range decls {
		if d.Kind == "expiring" {
			continue // openExpiringSets
		}
		sc := serve.SetConfig{Name: d.Name, Kind: d.Kind, FPRate: d.FPRate, Capacity: d.Capacity,
			RebuildInterval: d.RebuildInterval, Registerer: reg}
		if d.Normalize == "lowertrim" {
			sc.Normalizer = bloomgate.LowerTrim
		}
		timeout := orDefault(d.ConnectTimeout, defaultConnectTimeout)
		switch {
		case d.Postgres != "":
			cctx, cancel := context.WithTimeout(ctx, timeout)
			pool, err := postgres.Connect(cctx, d.Postgres)
			cancel()
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: postgres: %w", d.Name, timeoutHint(err, cctx, timeout))
			}
			closers = append(closers, pool.Close)
			src, err := postgres.New(postgres.Config{Pool: pool, Query: d.Query, Table: d.Table, Column: d.Column})
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: %w", d.Name, err)
			}
			sc.Source = src
			if d.Confirm != "" {
				sc.Confirm = postgres.Confirm{Pool: pool, Query: d.Confirm}
			}
		case d.SQLite != "":
			db, err := sqlite.Open(d.SQLite)
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: sqlite: %w", d.Name, err)
			}
			closers = append(closers, func() { db.Close() })
			src, err := sqlite.New(sqlite.Config{DB: db, Query: d.Query, Table: d.Table, Column: d.Column})
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: %w", d.Name, err)
			}
			sc.Source = src
			if d.Confirm != "" {
				sc.Confirm = sqlite.Confirm{DB: db, Query: d.Confirm}
			}
		}
		if d.Follow {
			k, cs, err := openKeeper(ctx, d, sc, dataDir, log.With("set", d.Name))
			closers = append(closers, cs...)
			if err != nil {
				return nil, closeAll, err
			}
			sc.Keeper = k
		}
		out = append(out, sc)
	}
	return out, closeAll, nil
}

// registerServerMetrics exports the store's and the RESP server's counters.
func registerServerMetrics(reg *prometheus.Registry, store *serve.Store, srv *resp.Server) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		gauge("bloomgate_serve_used_memory_bytes", "Bytes held by standalone filters.", func() float64 { return float64(store.UsedMemory()) }),
		gauge("bloomgate_serve_keys", "Keys in the keyspace, table-backed sets included.", func() float64 { return float64(store.Len()) }),
		gauge("bloomgate_serve_ready", "1 when every table-backed set is ready.", func() float64 {
			if store.Ready() {
				return 1
			}
			return 0
		}),
		gauge("bloomgate_serve_resp_connections", "Open Redis protocol connections.", func() float64 { return float64(srv.Stats().Connections) }),
		counter("bloomgate_serve_resp_connections_total", "Accepted Redis protocol connections.", func() float64 { return float64(srv.Stats().ConnectionsTotal) }),
		counter("bloomgate_serve_resp_rejected_connections_total", "Connections refused by maxclients.", func() float64 { return float64(srv.Stats().ConnectionsRejected) }),
		counter("bloomgate_serve_resp_commands_total", "Redis protocol commands processed.", func() float64 { return float64(srv.Stats().Commands) }),
	)
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bloomgate version\n\nPrints the build: version (\"devel\" for a build from a work tree), VCS revision, Go version.")
	}
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	v := version.Get()
	fmt.Fprintf(stdout, "bloomgate %s\n", v.Version)
	if v.Revision != "" {
		fmt.Fprintf(stdout, "revision %s\n", v.Revision)
	}
	fmt.Fprintf(stdout, "go %s\n", v.GoVersion)
	return exitOK
}
