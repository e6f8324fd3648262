package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
	// pg relays every statement while the sets connect, and answers
	// the checked statements after (Answer).
	pg        *pgwire.Server
	tlsConfig *tls.Config // the listeners' (nil: none)

	// The background start (connect): started is closed once every set
	// is connected; stopStart cancels it and startDone says it ended.
	started   chan struct{}
	stopStart context.CancelFunc
	startDone chan struct{}
	startErr  atomic.Pointer[error]
	stages    StartStages

	// closers release the sets' sources, feeds and transports and the
	// PostgreSQL front end's pools; Close runs them last, in reverse.
	mu      sync.Mutex
	closers []func()
	errc    chan error

	closeOnce sync.Once
	closeErr  error
}

// ErrStart is what a failure of Listen's background start wraps (the
// error itself names the set and what to fix): a set's database, change
// feed, fan-out or answer statement failed its check.
var ErrStart = errors.New("server: start failed")

// startError is a background start's failure: its message is the cause's.
type startError struct{ err error }

func (e startError) Error() string        { return e.err.Error() }
func (e startError) Unwrap() []error      { return []error{ErrStart, e.err} }
func (e startError) Is(target error) bool { return target == ErrStart }

// StartStages are the durations of a start's stages, for a start-up
// breakdown.
type StartStages struct {
	// Listening is Listen's call to serving: the checks that need no
	// network, binding, recovering the keyspace from DataDir.
	Listening time.Duration
	// Connected is serving to every set's source, change feed and fan-out
	// connected and checked, and the PostgreSQL front end's answer
	// statements checked (all in parallel).
	Connected time.Duration
}

// Start is Listen, then waits for the background start: it returns once
// every set is connected and checked (the sets then become ready in the
// background: Ready), or the start's error after closing the server. ctx
// bounds the start only: the server runs until Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s, err := Listen(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-s.started:
		return s, nil
	case err = <-s.errc:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.Close()
	return nil, err
}

// Listen checks what needs no network (cfg, the TLS certificate, the
// fan-out key files), binds the listeners, opens the keyspace (recovering
// it from DataDir), declares every set in it and serves at once. Each
// set's source, change feed and fan-out are then connected and checked in
// the background, all sets in parallel, each within its ConnectTimeout,
// and with them the PostgreSQL front end's answer statements.
//
// Until a set is connected it is not ready: it answers "maybe" (BF.EXISTS
// 1, never "absent": its name is declared), /readyz answers 503 with the
// reason "starting", its confirm query fails, and the PostgreSQL front end
// relays every statement. Started is closed once every set is connected;
// a failure is sent on Err wrapped in ErrStart, and the server goes on
// answering "maybe" until Close.
func Listen(cfg Config) (*Server, error) {
	t0 := time.Now()
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
	for i := range cfg.Sets {
		if _, fanned := transports[cfg.Sets[i].Fanout.Transport]; fanned {
			if _, err := fanoutKey(&cfg.Sets[i], slog.New(slog.DiscardHandler)); err != nil {
				return nil, err
			}
		}
	}
	s := &Server{cfg: cfg, log: cfg.Logger, errc: make(chan error, 4), tlsConfig: tlsConfig,
		started: make(chan struct{}), startDone: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		close(s.startDone)
		s.abort()
		return nil, err
	}
	// Bind first: a taken port is an error before recovery, and an
	// embedder's port 0 is known as soon as Listen returns.
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

	pending := make([]*pendingSet, len(cfg.Sets))
	for i := range cfg.Sets {
		pending[i] = newPendingSet(&cfg.Sets[i], cfg.DataDir)
	}
	sets := declaredSets(&s.cfg, pending)
	s.store, err = serve.Open(serve.Config{
		DataDir:          cfg.DataDir,
		Fsync:            cfg.Fsync,
		SnapshotInterval: cfg.SnapshotInterval,
		MaxMemory:        cfg.MaxMemory,
		Sets:             sets,
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
		// It relays every statement until connect gives it the checked
		// statements (Answer), the sessions opened meanwhile included.
		s.pg, err = pgwire.New(frontConfig(&s.cfg, tlsConfig, reg, s.log))
		if err != nil {
			return fail(err)
		}
	}
	if s.httpLn != nil {
		var deps map[string]httpapi.Dependency
		if s.pg != nil {
			// /readyz covers the front end's upstream.
			deps = map[string]httpapi.Dependency{"postgres-upstream": s.pg}
		}
		s.http = &http.Server{
			Handler:           s.readyzStarting(httpapi.Handler(httpapi.Config{Store: s.store, Token: cfg.Password, Gatherer: reg, Dependencies: deps})),
			ReadHeaderTimeout: orDefault(cfg.HTTPReadHeaderTimeout, DefaultHTTPReadHeaderTimeout),
			IdleTimeout:       orDefault(cfg.HTTPIdleTimeout, DefaultHTTPIdleTimeout),
			TLSConfig:         tlsConfig,
			MaxHeaderBytes:    64 << 10,
		}
	}

	// Serve, now that nothing here can fail.
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
			if err := s.pg.Serve(s.pgLn); !errors.Is(err, pgwire.ErrClosed) && !errors.Is(err, net.ErrClosed) {
				s.errc <- err
			}
		}()
		s.log.Info("serving the PostgreSQL protocol (relaying every statement until the sets are connected)", "addr", s.pgLn.Addr().String(), "upstream", cfg.PostgresFront.Upstream)
	}
	s.stages.Listening = time.Since(t0)

	ctx, cancel := context.WithCancel(context.Background())
	s.stopStart = cancel
	go s.connect(ctx, pending)
	return s, nil
}

// connect is the background start: it connects and checks every set and
// the PostgreSQL front end's statements, all in parallel, then lets the
// sets run (their stand-ins pass through from then on) and hands the
// PostgreSQL listener to the front end that answers.
func (s *Server) connect(ctx context.Context, pending []*pendingSet) {
	defer close(s.startDone)
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(pending)+1)
	closers := make([][]func(), len(pending)+1)
	for i, p := range pending {
		wg.Go(func() { closers[i], errs[i] = openSet(ctx, &s.cfg, i, p) })
	}
	var stmts []pgwire.Statement
	if s.pg != nil {
		wg.Go(func() {
			stmts, closers[len(pending)], errs[len(pending)] = answerStatements(ctx, &s.cfg, s.store)
		})
	}
	wg.Wait()
	s.mu.Lock()
	for _, cs := range closers {
		s.closers = append(s.closers, cs...)
	}
	s.mu.Unlock()
	// The first error in the config's order, whichever came first.
	if err := firstErr(errs); err != nil {
		if ctx.Err() != nil {
			return // closed while starting
		}
		err = startError{err}
		s.startErr.Store(&err)
		s.errc <- err
		return
	}
	for _, p := range pending {
		close(p.opened)
	}
	if s.pg != nil {
		if err := s.pg.Answer(stmts); err != nil {
			err = startError{err}
			s.startErr.Store(&err)
			s.errc <- err
			return
		}
		s.log.Info("answering on the PostgreSQL protocol", "addr", s.pgLn.Addr().String())
	}
	s.stages.Connected = time.Since(t0)
	s.log.Info("sets connected", "sets", len(pending), "seconds", s.stages.Connected.Seconds(),
		"listen_seconds", s.stages.Listening.Seconds())
	close(s.started)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Started is closed once every set is connected and checked (Listen).
func (s *Server) Started() <-chan struct{} { return s.started }

// Stages returns the durations of the start's stages; Connected is 0
// until Started is closed.
func (s *Server) Stages() StartStages {
	select {
	case <-s.started:
		return s.stages
	default:
		return StartStages{Listening: s.stages.Listening}
	}
}

// readyzStarting makes /readyz give each set that is not ready the reason
// "starting" while the sets are being connected ("start failed: …" after
// a failed start).
func (s *Server) readyzStarting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.started:
			h.ServeHTTP(w, r)
			return
		default:
		}
		if r.URL.Path != "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		rec := &bufferedResponse{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		var body map[string]json.RawMessage // every field kept as it is
		var sets map[string]json.RawMessage
		if rec.code != http.StatusOK && rec.code != http.StatusServiceUnavailable ||
			json.Unmarshal(rec.body.Bytes(), &body) != nil || json.Unmarshal(body["sets"], &sets) != nil {
			rec.flush(w)
			return
		}
		reason := "starting"
		if e := s.startErr.Load(); e != nil {
			reason = "start failed: " + (*e).Error()
		}
		for name, raw := range sets {
			var set map[string]json.RawMessage
			if json.Unmarshal(raw, &set) != nil || string(set["ready"]) == "true" {
				continue
			}
			set["reason"], _ = json.Marshal(reason)
			if b, err := json.Marshal(set); err == nil {
				sets[name] = b
			}
		}
		body["sets"], _ = json.Marshal(sets)
		b, err := json.Marshal(body)
		if err != nil {
			rec.flush(w)
			return
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.code)
		w.Write(append(b, '\n'))
	})
}

// bufferedResponse holds a handler's response for readyzStarting.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

func (b *bufferedResponse) flush(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.WriteHeader(b.code)
	w.Write(b.body.Bytes())
}

// openSet connects set i's source and, for a followed set, checks its
// change feed and fan-out (see openKeeper), filling in p. The returned
// closers release them; they are returned with an error too.
func openSet(ctx context.Context, cfg *Config, i int, p *pendingSet) ([]func(), error) {
	var closers []func()
	s := &cfg.Sets[i]
	log := cfg.Logger.With("set", s.Name)
	tr := startTransport(ctx, s, log) // beside the source: independent
	var src *openedSource
	if s.Source.Driver != SourceNone {
		var err error
		src, err = sources[s.Source.Driver].open(ctx, s, log)
		if err != nil {
			if tr != nil {
				_, cs, _ := tr.get()
				closers = append(closers, cs...)
			}
			return closers, err
		}
		closers = append(closers, src.closers...)
	}
	p.src = src
	if s.expiring() {
		feed, cs, err := openExpiringFeed(ctx, s, src)
		closers = append(closers, cs...)
		p.expFd = feed
		return closers, err
	}
	if !s.follows() {
		return closers, nil
	}
	sc := setConfig(cfg, s)
	if src != nil {
		sc.Source, sc.Confirm = src.source, src.confirm
	}
	k, cs, err := openKeeper(ctx, s, src, tr, sc, cfg.DataDir, log)
	closers = append(closers, cs...)
	p.keeper = k
	return closers, err
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
		s.stopStart()
		<-s.startDone
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

// abort undoes a Listen that failed part way.
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
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
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
