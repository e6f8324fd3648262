package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/serve/httpapi"
	"github.com/bloomgate/bloomgate/serve/pgwire"
	"github.com/bloomgate/bloomgate/serve/resp"
)

// Defaults of Config's fields that this package fills in.
const (
	DefaultHTTPReadHeaderTimeout = 10 * time.Second
	DefaultHTTPIdleTimeout       = 2 * time.Minute
	// shutdownTimeout bounds Close's wait for in-flight requests.
	shutdownTimeout = 30 * time.Second
)

// Server is a running server: its keyspace, its table-backed sets and its
// listeners. Its methods are safe for concurrent use.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store *serve.Store

	respLn, httpLn, pgLn net.Listener
	resp                 *resp.Server
	http                 *http.Server
	pg                   *pgwire.Server

	// closers release the sets' sources, feeds and transports and the
	// PostgreSQL front end's pools; Close runs them last, in reverse.
	closers []func()
	errc    chan error

	closeOnce sync.Once
	closeErr  error
}

// Start checks cfg, binds its listeners, opens the sets' sources and
// checks their servers (within each set's ConnectTimeout, ctx bounding the
// whole), opens the keyspace (recovering it from DataDir) and serves. The
// sets become ready in the background (Ready). ctx bounds the start only:
// the server runs until Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg.Sets = append([]SetConfig(nil), cfg.Sets...)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	for _, addr := range []string{cfg.RESP, cfg.HTTP} {
		if err := protectedMode(addr, cfg.Password); err != nil {
			return nil, err
		}
	}
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, errc: make(chan error, 3)}
	fail := func(err error) (*Server, error) {
		s.abort()
		return nil, err
	}
	// Bind first: a taken port is an error before the slow start (sets,
	// recovery), and an embedder's port 0 is known as soon as Start returns.
	for _, l := range []struct {
		addr string
		ln   *net.Listener
	}{{cfg.RESP, &s.respLn}, {cfg.HTTP, &s.httpLn}, {cfg.PostgresFront.Listen, &s.pgLn}} {
		if l.addr == "" {
			continue
		}
		if *l.ln, err = net.Listen("tcp", l.addr); err != nil {
			return fail(err)
		}
	}

	sets, expiring, closers, err := openSets(ctx, &s.cfg)
	s.closers = append(s.closers, closers...)
	if err != nil {
		return fail(err)
	}
	s.store, err = serve.Open(serve.Config{
		DataDir:          cfg.DataDir,
		Fsync:            cfg.Fsync,
		SnapshotInterval: cfg.SnapshotInterval,
		MaxMemory:        cfg.MaxMemory,
		Sets:             sets,
		ExpiringSets:     expiring,
		Logger:           s.log,
		Positions:        positionNotation(),
	})
	if err != nil {
		return fail(err)
	}
	reg := cfg.Registry
	if err := reg.Register(setCollector{s.store}); err != nil {
		return fail(fmt.Errorf("metrics: %w", err))
	}

	if s.respLn != nil {
		lim := cfg.RESPLimits
		s.resp, err = resp.New(resp.Config{
			Store: s.store, Password: cfg.Password, TLSConfig: tlsConfig, MaxConns: lim.MaxClients,
			MaxBulkLen: lim.MaxBulkLen, MaxArgs: lim.MaxArgs, IdleTimeout: lim.Timeout, Logger: s.log,
			MaxPreAuthConns: lim.PreAuthMaxClients, PreAuthTimeout: lim.PreAuthTimeout,
			AuthFailureDelay: lim.AuthFailureDelay,
		})
		if err != nil {
			return fail(err)
		}
		if err := registerServerMetrics(reg, s.store, s.resp); err != nil {
			return fail(err)
		}
	}
	if s.pgLn != nil {
		pg, closers, err := newPostgresFront(ctx, &s.cfg, s.store, tlsConfig, reg, s.log)
		s.closers = append(s.closers, closers...)
		if err != nil {
			return fail(err)
		}
		s.pg = pg
	}
	if s.httpLn != nil {
		var deps map[string]httpapi.Dependency
		if s.pg != nil {
			// /readyz covers the front end's upstream.
			deps = map[string]httpapi.Dependency{"postgres-upstream": s.pg}
		}
		s.http = &http.Server{
			Handler:           httpapi.Handler(httpapi.Config{Store: s.store, Token: cfg.Password, Gatherer: reg, Dependencies: deps}),
			ReadHeaderTimeout: orDefault(cfg.HTTPReadHeaderTimeout, DefaultHTTPReadHeaderTimeout),
			IdleTimeout:       orDefault(cfg.HTTPIdleTimeout, DefaultHTTPIdleTimeout),
			TLSConfig:         tlsConfig,
			MaxHeaderBytes:    64 << 10,
		}
	}

	// Serve, now that nothing can fail.
	if s.resp != nil {
		go func() { s.errc <- s.resp.Serve(s.respLn) }()
		s.log.Info("serving the Redis protocol", "addr", s.respLn.Addr().String())
	}
	if s.http != nil {
		go func() {
			if tlsConfig != nil {
				s.errc <- s.http.ServeTLS(s.httpLn, "", "")
			} else {
				s.errc <- s.http.Serve(s.httpLn)
			}
		}()
		s.log.Info("serving HTTP", "addr", s.httpLn.Addr().String())
	}
	if s.pg != nil {
		go func() {
			if err := s.pg.Serve(s.pgLn); !errors.Is(err, pgwire.ErrClosed) {
				s.errc <- err
			}
		}()
		s.log.Info("serving the PostgreSQL protocol", "addr", s.pgLn.Addr().String(), "upstream", cfg.PostgresFront.Upstream)
	}
	return s, nil
}

// openSets opens each set's source and, for followed sets, checks their
// change feed and fan-out (see openKeeper). The returned closers release
// them; they are returned with an error too.
func openSets(ctx context.Context, cfg *Config) ([]serve.SetConfig, []serve.ExpiringSetConfig, []func(), error) {
	var closers []func()
	var sets []serve.SetConfig
	var expiring []serve.ExpiringSetConfig
	for i := range cfg.Sets {
		s := &cfg.Sets[i]
		log := cfg.Logger.With("set", s.Name)
		var src *openedSource
		if s.Source.Driver != SourceNone {
			var err error
			src, err = sources[s.Source.Driver].open(ctx, s, log)
			if err != nil {
				return nil, nil, closers, err
			}
			closers = append(closers, src.closers...)
		}
		if s.Kind == KindExpiring {
			ec, cs, err := expiringSetConfig(ctx, s, src, log)
			closers = append(closers, cs...)
			if err != nil {
				return nil, nil, closers, err
			}
			expiring = append(expiring, ec)
			continue
		}
		sc := serve.SetConfig{Name: s.Name, Family: s.Kind.Family(), FPRate: s.FPRate, Capacity: s.Capacity,
			RebuildInterval: s.RebuildInterval, Registerer: cfg.Registry}
		if s.Normalize == NormalizeLowerTrim {
			sc.Normalizer = bloomgate.LowerTrim
		}
		if src != nil {
			sc.Source, sc.Confirm = src.source, src.confirm
		}
		if s.follows() {
			k, cs, err := openKeeper(ctx, s, src, sc, cfg.DataDir, log)
			closers = append(closers, cs...)
			if err != nil {
				return nil, nil, closers, err
			}
			sc.Keeper = k
		}
		sets = append(sets, sc)
	}
	return sets, expiring, closers, nil
}

// RESPAddr returns the Redis protocol listener's address, or nil without
// one.
func (s *Server) RESPAddr() net.Addr { return addrOf(s.respLn) }

// HTTPAddr returns the HTTP listener's address, or nil without one.
func (s *Server) HTTPAddr() net.Addr { return addrOf(s.httpLn) }

// PostgresAddr returns the PostgreSQL front end's address, or nil without
// one.
func (s *Server) PostgresAddr() net.Addr { return addrOf(s.pgLn) }

func addrOf(ln net.Listener) net.Addr {
	if ln == nil {
		return nil
	}
	return ln.Addr()
}

// Store returns the keyspace.
func (s *Server) Store() *serve.Store { return s.store }

// Ready reports whether every table-backed set is ready and, with the
// PostgreSQL front end, its upstream answers (what /readyz says).
func (s *Server) Ready() bool {
	return s.store.Ready() && (s.pg == nil || s.pg.Upstream().Ready)
}

// Connections returns the open Redis protocol connections.
func (s *Server) Connections() int64 {
	if s.resp == nil {
		return 0
	}
	return s.resp.Stats().Connections
}

// Err receives a listener's failure: the server no longer serves all it
// was configured to, and the caller decides whether to Close it.
func (s *Server) Err() <-chan error { return s.errc }

// Close stops accepting, waits up to 30 s for in-flight requests, writes
// the final snapshot and releases the sets' connections. It returns the
// final snapshot's error. Close is idempotent.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return s.Shutdown(ctx)
}

// Shutdown is Close with ctx bounding the wait for in-flight requests.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.log.Info("shutting down: finishing in-flight requests, then a snapshot")
		if s.resp != nil {
			s.resp.Shutdown(ctx)
		}
		if s.http != nil {
			s.http.Shutdown(ctx)
		}
		if s.pg != nil {
			s.pg.Shutdown(ctx)
		}
		if err := s.store.Close(); err != nil {
			s.closeErr = fmt.Errorf("final snapshot: %w", err)
		}
		s.release()
		s.log.Info("stopped")
	})
	return s.closeErr
}

// abort undoes a Start that failed part way.
func (s *Server) abort() {
	for _, ln := range []net.Listener{s.respLn, s.httpLn, s.pgLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if s.store != nil {
		s.store.Close()
	}
	s.release()
}

func (s *Server) release() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
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

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
