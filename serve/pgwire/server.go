package pgwire

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/changefeed"
)

// Set is what the front end needs of a table-backed set (*serve.Set is
// one). Its methods must be safe for concurrent use and must not block.
type Set interface {
	// Ready reports whether the set's filter is authoritative.
	Ready() bool
	// Position is the change-feed position the filter reflects.
	Position() changefeed.Position
	// MayContainAt reports false only if key is definitely absent as of
	// pos (with pos 0: as of the feed's lag check).
	MayContainAt(key []byte, pos changefeed.Position) bool
	// PositionChanged returns a channel closed when Position next changes
	// (a waiter takes it, checks Position, then waits on it).
	PositionChanged() <-chan struct{}
}

// Statement is a statement a set answers: when a client sends it with a key
// the set's filter says is definitely absent, the front end answers "no
// rows" itself.
type Statement struct {
	// SetName names the set in metrics, logs and errors. Required.
	SetName string
	// SQL is the statement, with the key as a parameter ($1, or $k when
	// other parameters are compared with other text columns). Required;
	// checked by ParseTemplate against Table and Column.
	SQL string
	// Table and Column are the set's table and key column. Required.
	Table, Column string
	// Database is the database the set's table is in: sessions connected
	// to another database are never answered locally. Required.
	Database string
	// ParamOIDs are the types of $1…$n as the database infers them (text
	// or varchar), for a Describe of the statement answered locally.
	// Default: none, such a Describe is forwarded unless the client
	// declared every parameter's type.
	ParamOIDs []uint32
	// Set is the set. Required.
	Set Set
	// ReadPosition reads the database's WAL insert position
	// (pg_current_wal_insert_lsn()) on a connection of the set's own; the
	// front end calls it at most once at a time per set and shares each
	// read among the queries that arrived before it started. It is called
	// with a context that is never done, and must bound its read itself
	// (postgres.PositionReader's timeout does): the queries waiting for a
	// read give up after Config.PositionTimeout, but the next read starts
	// only when this one has returned. Required.
	ReadPosition func(ctx context.Context) (changefeed.Position, error)
}

// Config configures a Server. The zero value of every field but Upstream
// means its default.
type Config struct {
	// Upstream is the PostgreSQL server sessions are relayed to: host:port
	// (plain text), or a URL (postgres://host:port/?sslmode=verify-full&
	// sslrootcert=ca.pem) or keyword/value string of which the host, the
	// port and the TLS parameters (sslmode, sslrootcert, sslcert, sslkey,
	// sslsni) are used as libpq uses them; sslmode defaults to prefer
	// there, as in libpq. Required.
	Upstream string
	// TLSConfig, when set, gives the certificate with which a client's
	// SSLRequest is accepted; without it the request is answered 'N' (a
	// client with sslmode=prefer continues in plain text, one with
	// require refuses). Default: nil. Plain-text clients are accepted either
	// way.
	TLSConfig *tls.Config
	// Statements are the statements answered locally. Default: none (a
	// plain relay, until Server.Answer gives them).
	Statements []Statement
	// MaxConns bounds client connections; one more gets PostgreSQL's
	// "sorry, too many clients already" and is closed. Default: 1000.
	MaxConns int
	// MaxStartupConns bounds the connections that have not sent their
	// startup packet yet (TLS negotiation included), which do not count
	// against MaxConns: past it the oldest of them is closed, so that
	// sockets that send nothing cannot keep clients out. Default: 128.
	MaxStartupConns int
	// MaxMessageSize bounds one client message's body in bytes; a larger
	// one gets an error and the connection is closed. Default: 64 MiB.
	MaxMessageSize int
	// StartupTimeout bounds the startup packet and the authentication
	// exchange. Default: 10 s.
	StartupTimeout time.Duration
	// DialTimeout bounds connecting to Upstream. Default: 5 s.
	DialTimeout time.Duration
	// UpstreamCheckInterval is how often Serve checks that the upstream
	// answers (see UpstreamStatus). Default: 5 s.
	UpstreamCheckInterval time.Duration
	// PositionWait is how long a query that could be answered locally
	// waits for its set to apply the WAL insert position read after it
	// arrived, before it is forwarded (reason "lag"). Default: 100 ms.
	PositionWait time.Duration
	// PositionTimeout bounds a query's wait for a read of the insert
	// position; a read that fails or takes longer forwards the queries
	// waiting for it (reason "position_error"). Default: 1 s.
	PositionTimeout time.Duration
	// Logger receives errors and a line per refused connection. Default:
	// discard.
	Logger *slog.Logger
	// Registerer receives the metrics (bloomgate_pgwire_*). Default: none.
	Registerer prometheus.Registerer
}

// Defaults of Config.
const (
	DefaultMaxConns        = 1000
	DefaultMaxStartupConns = 128
	DefaultMaxMessageSize  = 64 << 20
	DefaultStartupTimeout  = 10 * time.Second
	DefaultDialTimeout     = 5 * time.Second
	DefaultUpstreamCheck   = 5 * time.Second
	DefaultPositionWait    = 100 * time.Millisecond
	DefaultPositionTimeout = time.Second
)

// Reasons a statement that could be answered locally was forwarded (the
// reason label of bloomgate_pgwire_forwarded_total).
const (
	ReasonNotReady      = "not_ready"      // the set is not ready
	ReasonPresent       = "present"        // the filter says the key may be present
	ReasonLag           = "lag"            // the set did not reach the insert position within PositionWait
	ReasonPositionError = "position_error" // reading the insert position failed
	ReasonTableChanged  = "table_changed"  // the set's table was redefined since start (changefeed.ErrTableChanged)
	ReasonTransaction   = "transaction"    // the session is in a transaction block
	ReasonNotLearned    = "not_learned"    // the statement's result shape is not known yet (learned from its first forward)
	ReasonSession       = "session"        // the session's settings (search_path, role, encoding) rule it out
	ReasonBatch         = "batch"          // it came in a batch with other work, or pipelined behind it
	ReasonKey           = "key"            // the key is NULL, not text, or invalid UTF-8
)

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("pgwire: server closed")

// stmtRuntime is a Statement ready to be matched.
type stmtRuntime struct {
	Statement
	tmpl    *Template
	label   string // the statement's number within its set, for metrics
	reader  *positionReader
	changed sync.Once // logs the table's change
	local   prometheus.Counter
	fwd     *prometheus.CounterVec // by reason
	latency prometheus.Observer    // forwarded round trips
}

// Server relays PostgreSQL sessions and answers configured statements for
// absent keys. It is safe for concurrent use.
type Server struct {
	cfg Config
	up  upstream
	log *slog.Logger
	// stmts is set once (New or Answer) and never changed after, so an
	// index into it stays valid in every session for good.
	stmts atomic.Pointer[[]*stmtRuntime]
	cache learnedCache

	local   *prometheus.CounterVec // by set, statement
	fwd     *prometheus.CounterVec // by set, statement, reason
	latency *prometheus.HistogramVec
	answer  sync.Mutex // serialises Answer
	health  upstreamHealth
	stop    chan struct{} // closed by Shutdown: ends checkLoop

	mu       sync.Mutex
	ln       net.Listener
	sessions map[*session]struct{}
	keys     map[uint32]*session // BackendKeyData process ID we gave → session
	closed   bool
	wg       sync.WaitGroup
	starting map[net.Conn]uint64 // connections before their startup packet → accept order
	accepted uint64

	conns, connsTotal, rejected atomic.Int64
	sessionConns                atomic.Int64 // connections past their startup packet
}

// startingAdd counts c as a connection before its startup packet, first
// closing the oldest such connection when MaxStartupConns are open.
func (s *Server) startingAdd(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.starting) >= s.cfg.MaxStartupConns {
		var oldest net.Conn
		for o, seq := range s.starting {
			if oldest == nil || seq < s.starting[oldest] {
				oldest = o
			}
		}
		delete(s.starting, oldest)
		oldest.Close() // its startup read fails; its handler returns
		s.rejected.Add(1)
	}
	s.accepted++
	s.starting[c] = s.accepted
}

func (s *Server) startingDone(c net.Conn) {
	s.mu.Lock()
	delete(s.starting, c)
	s.mu.Unlock()
}

// New checks cfg and returns a Server. Each Statement is checked by
// ParseTemplate; the error names the set and the statement.
func New(cfg Config) (*Server, error) {
	if cfg.Upstream == "" {
		return nil, errors.New("pgwire: Upstream is required")
	}
	up, err := parseUpstream(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxStartupConns == 0 {
		cfg.MaxStartupConns = DefaultMaxStartupConns
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = DefaultStartupTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.UpstreamCheckInterval == 0 {
		cfg.UpstreamCheckInterval = DefaultUpstreamCheck
	}
	if cfg.PositionWait == 0 {
		cfg.PositionWait = DefaultPositionWait
	}
	if cfg.PositionTimeout == 0 {
		cfg.PositionTimeout = DefaultPositionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns < 0 || cfg.MaxStartupConns < 0 || cfg.MaxMessageSize < 0 || cfg.PositionWait < 0 || cfg.UpstreamCheckInterval < 0 {
		return nil, errors.New("pgwire: MaxConns, MaxMessageSize, PositionWait and UpstreamCheckInterval must not be negative")
	}
	s := &Server{cfg: cfg, up: up, log: cfg.Logger, stop: make(chan struct{}), sessions: map[*session]struct{}{}, keys: map[uint32]*session{},
		starting: map[net.Conn]uint64{}}
	s.cache.m = map[cacheKey]*learned{}
	s.health.status = UpstreamStatus{Addr: up.addr, Error: "not checked yet"}
	local := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bloomgate_pgwire_answered_total",
		Help: "Statements the PostgreSQL front end answered itself (the key definitely absent), by set and statement number.",
	}, []string{"set", "statement"})
	fwd := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bloomgate_pgwire_forwarded_total",
		Help: "Configured statements the PostgreSQL front end forwarded to the database, by set, statement number and reason.",
	}, []string{"set", "statement", "reason"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bloomgate_pgwire_upstream_seconds",
		Help:    "Round trips of forwarded configured statements, from the front end sending the statement's Query or Sync to the upstream's ReadyForQuery, by set and statement number.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"set", "statement"})
	s.local, s.fwd, s.latency = local, fwd, latency
	if len(cfg.Statements) > 0 {
		if err := s.Answer(cfg.Statements); err != nil {
			return nil, err
		}
	}
	if cfg.Registerer != nil {
		gauge := func(name, help string, f func() float64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
		}
		counter := func(name, help string, f func() float64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
		}
		for _, c := range []prometheus.Collector{local, fwd, latency,
			gauge("bloomgate_pgwire_upstream_up", "1 when the upstream answered the front end's last check (a connection and an SSLRequest), 0 when it did not or a session could not connect since.", func() float64 {
				if s.health.get().Ready {
					return 1
				}
				return 0
			}),
			gauge("bloomgate_pgwire_upstream_check_seconds", "The round trip of the front end's last check of the upstream.", func() float64 { return s.health.get().LatencySeconds }),
			gauge("bloomgate_pgwire_connections", "Open PostgreSQL front-end connections.", func() float64 { return float64(s.conns.Load()) }),
			counter("bloomgate_pgwire_connections_total", "Accepted PostgreSQL front-end connections.", func() float64 { return float64(s.connsTotal.Load()) }),
			counter("bloomgate_pgwire_rejected_connections_total", "Connections refused by the connection limit, or closed before their startup packet to make room (MaxStartupConns).", func() float64 { return float64(s.rejected.Load()) }),
		} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("pgwire: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// ErrAnswering is returned by Answer when the server already has its
// statements.
var ErrAnswering = errors.New("pgwire: the server already answers its statements")

// Answer gives a server started without Statements the statements it
// answers locally (see Config.Statements), once: the sessions already open
// match them from their next message on, as new ones do. A server that
// listens before its sets are connected relays every statement until then,
// and a client's pooled session opened meanwhile is not left relay-only.
// Each Statement is checked by ParseTemplate; the error names the set and
// the statement, and nothing changes.
func (s *Server) Answer(stmts []Statement) error {
	s.answer.Lock()
	defer s.answer.Unlock()
	if s.stmts.Load() != nil {
		return ErrAnswering
	}
	var table []*stmtRuntime
	readers := map[string]*positionReader{}
	perSet := map[string]int{}
	for i, st := range stmts {
		if st.SetName == "" || st.Set == nil || st.ReadPosition == nil || st.Database == "" {
			return fmt.Errorf("pgwire: statement %d: SetName, Set, ReadPosition and Database are required", i+1)
		}
		tmpl, err := ParseTemplate(st.SQL, st.Table, st.Column)
		if err != nil {
			return fmt.Errorf("set %q: answer %q: %w", st.SetName, st.SQL, err)
		}
		r := readers[st.SetName]
		if r == nil {
			r = &positionReader{read: st.ReadPosition}
			readers[st.SetName] = r
		}
		perSet[st.SetName]++
		label := strconv.Itoa(perSet[st.SetName])
		rt := &stmtRuntime{Statement: st, tmpl: tmpl, label: label, reader: r,
			local:   s.local.WithLabelValues(st.SetName, label),
			fwd:     s.fwd.MustCurryWith(prometheus.Labels{"set": st.SetName, "statement": label}),
			latency: s.latency.WithLabelValues(st.SetName, label)}
		table = append(table, rt)
	}
	s.stmts.Store(&table)
	return nil
}

// table returns the statements answered locally (none before Answer).
func (s *Server) table() []*stmtRuntime {
	if t := s.stmts.Load(); t != nil {
		return *t
	}
	return nil
}

// Serve accepts connections on ln until Shutdown, and returns ErrClosed
// then (or the listener's error).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.ln = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.checkLoop(s.stop)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		s.connsTotal.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

// Shutdown stops accepting, closes the sessions that await no answer
// (as PostgreSQL's fast shutdown, an idle transaction is rolled back by
// the upstream), waits for the others to end until ctx is done, then closes
// those left. It may be called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for ss := range s.sessions {
		ss.mu.Lock()
		idle := ss.idleLocked()
		ss.mu.Unlock()
		if idle {
			ss.close()
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for ss := range s.sessions {
		ss.close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// Addr returns the listener's address (nil before Serve).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// fatal sends a FATAL ErrorResponse and nothing else.
func fatal(c net.Conn, code, msg string) {
	b, err := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg}).Encode(nil)
	if err == nil {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(b)
	}
}

func (s *Server) handle(c net.Conn) {
	defer c.Close()
	s.conns.Add(1)
	defer s.conns.Add(-1)
	c.SetDeadline(time.Now().Add(s.cfg.StartupTimeout))
	s.startingAdd(c)
	startup, tc, br := s.startup(c)
	s.startingDone(c)
	if startup == nil {
		return
	}
	c = tc
	defer c.Close()
	// Counted from its startup packet on: sockets that send nothing
	// (bounded by MaxStartupConns) keep no client out.
	n := s.sessionConns.Add(1)
	defer s.sessionConns.Add(-1)
	if n > int64(s.cfg.MaxConns) {
		s.rejected.Add(1)
		fatal(c, "53300", "sorry, too many clients already")
		return
	}
	ss := newSession(s, c, br, startup)
	if !s.track(ss) {
		fatal(c, "57P01", "terminating connection due to administrator command")
		return
	}
	defer s.untrack(ss)
	ss.run()
}

// startup reads the client's startup packet, negotiating TLS on its
// SSLRequest, and returns it with the connection (TLS or not) and its
// reader, which holds what the client sent after the packet; nil when the
// connection is done (a cancel request, an error).
func (s *Server) startup(c net.Conn) (*pgproto3.StartupMessage, net.Conn, *bufio.Reader) {
	br := bufio.NewReaderSize(c, readBufferSize)
	be := pgproto3.NewBackend(&boundedReader{br: br}, c)
	secure := false
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			fatal(c, "08P01", "invalid startup packet: "+err.Error())
			return nil, c, nil
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest:
			if secure {
				fatal(c, "08P01", "invalid startup packet: SSLRequest over TLS")
				return nil, c, nil
			}
			if s.cfg.TLSConfig == nil {
				if _, err := c.Write([]byte{'N'}); err != nil {
					return nil, c, nil
				}
				continue
			}
			if br.Buffered() > 0 {
				// Bytes the client sent before our answer are not
				// encrypted, whatever they claim to be.
				fatal(c, "08P01", "received unencrypted data after SSL request")
				return nil, c, nil
			}
			if _, err := c.Write([]byte{'S'}); err != nil {
				return nil, c, nil
			}
			tc := tls.Server(c, s.cfg.TLSConfig)
			if err := tc.Handshake(); err != nil {
				s.log.Info("pgwire: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
				return nil, c, nil
			}
			c, secure = tc, true
			br = bufio.NewReaderSize(c, readBufferSize)
			be = pgproto3.NewBackend(&boundedReader{br: br}, c)
		case *pgproto3.GSSEncRequest:
			// GSSAPI encryption is not offered: 'N' makes the client go
			// on with TLS or plain text, as against a server without it.
			if _, err := c.Write([]byte{'N'}); err != nil {
				return nil, c, nil
			}
		case *pgproto3.CancelRequest:
			s.cancel(m)
			return nil, c, nil
		case *pgproto3.StartupMessage:
			return m, c, br
		}
	}
}

func (s *Server) track(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.sessions[ss] = struct{}{}
	return true
}

func (s *Server) untrack(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, ss)
	if ss.fakePID != 0 && s.keys[ss.fakePID] == ss {
		delete(s.keys, ss.fakePID)
	}
}

// issueKey gives ss a BackendKeyData of ours in place of the upstream's, so
// that a cancel request from its client can be routed to the right backend.
func (s *Server) issueKey(ss *session, upstream *pgproto3.BackendKeyData) *pgproto3.BackendKeyData {
	secret := make([]byte, max(len(upstream.SecretKey), 4))
	rand.Read(secret)
	s.mu.Lock()
	defer s.mu.Unlock()
	var pid uint32
	for {
		var b [4]byte
		rand.Read(b[:])
		pid = binary.BigEndian.Uint32(b[:]) & 0x7fffffff
		if _, used := s.keys[pid]; pid != 0 && !used {
			break
		}
	}
	ss.fakePID, ss.fakeSecret = pid, secret
	ss.upPID, ss.upSecret = upstream.ProcessID, append([]byte(nil), upstream.SecretKey...)
	s.keys[pid] = ss
	return &pgproto3.BackendKeyData{ProcessID: pid, SecretKey: secret}
}

// cancel forwards a cancel request to the backend of the session it names.
// As PostgreSQL, it answers nothing either way.
func (s *Server) cancel(m *pgproto3.CancelRequest) {
	s.mu.Lock()
	ss := s.keys[m.ProcessID]
	s.mu.Unlock()
	if ss == nil || subtle.ConstantTimeCompare(ss.fakeSecret, m.SecretKey) != 1 {
		return
	}
	c, err := s.dialUpstream(context.Background())
	if err != nil {
		s.log.Warn("pgwire: cancel request: upstream", "err", err)
		return
	}
	defer c.Close()
	b, err := (&pgproto3.CancelRequest{ProcessID: ss.upPID, SecretKey: ss.upSecret}).Encode(nil)
	if err == nil {
		c.SetDeadline(time.Now().Add(s.cfg.DialTimeout))
		c.Write(b)
		// PostgreSQL closes the connection once it has read the request.
		c.Read(make([]byte, 1))
	}
}

// decide reports why key must be forwarded, or "" when it is definitely
// absent as of a WAL insert position read after the query arrived. wait is
// the caller's timer for the position wait, stopped, reused across calls
// (one per session: nothing allocated per query).
func (s *Server) decide(ctx context.Context, st *stmtRuntime, key []byte, wait *time.Timer) string {
	if !st.Set.Ready() {
		return ReasonNotReady
	}
	if st.Set.MayContainAt(key, 0) {
		return ReasonPresent
	}
	pos, err := st.reader.after(ctx, s.cfg.PositionTimeout, wait)
	if errors.Is(err, changefeed.ErrTableChanged) {
		st.changed.Do(func() {
			s.log.Error("pgwire: the set's table was redefined: its answer statements are relayed from now on; restart bloomgate serve, and rebuild the set if the table's rows were rewritten",
				"set", st.SetName, "err", err)
		})
		return ReasonTableChanged
	}
	if err != nil {
		return ReasonPositionError
	}
	if !waitPosition(ctx, st.Set, pos, s.cfg.PositionWait, wait) {
		return ReasonLag
	}
	if st.Set.MayContainAt(key, pos) {
		if st.Set.Position() < pos || !st.Set.Ready() {
			return ReasonLag
		}
		return ReasonPresent
	}
	return ""
}

// waitPosition waits until set's applied position reaches pos, for at most
// d or until ctx is done, and reports whether it did. It sleeps until the
// set applies something (Set.PositionChanged), not on a clock: a waiting
// query costs nothing until then.
func waitPosition(ctx context.Context, set Set, pos changefeed.Position, d time.Duration, wait *time.Timer) bool {
	if set.Position() >= pos {
		return true
	}
	armed := false
	defer func() {
		if armed {
			wait.Stop()
		}
	}()
	for {
		// The channel before the position: a change after this read of
		// the position closes this channel.
		ch := set.PositionChanged()
		if set.Position() >= pos {
			return true
		}
		if !armed {
			wait.Reset(d)
			armed = true
		}
		select {
		case <-ch:
		case <-wait.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// learnedCache holds, per database, role and statement, the result shape
// the upstream described, once a forwarded execution of the statement
// succeeded for that role. It is dropped on DDL passing through and on the
// upstream's "cached plan must not change result type".
type learnedCache struct {
	mu  sync.Mutex
	m   map[cacheKey]*learned
	gen uint64 // counts clears: a shape described before one is stale
}

type cacheKey struct {
	db, user string
	stmt     int
}

type learned struct {
	row *pgproto3.RowDescription // formats all text
	raw []byte                   // the RowDescription row was decoded from, as the upstream sent it
	gen uint64                   // the cache's generation when it was described
}

func (c *learnedCache) get(k cacheKey) *learned {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

// put keeps a copy of l (the caller's may change later), unless the cache
// holds the same already.
func (c *learnedCache) put(k cacheKey, l *learned) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.gen != c.gen {
		return // described before DDL passed through
	}
	if old := c.m[k]; old != nil && old.row == l.row && old.gen == l.gen {
		return
	}
	c.m[k] = &learned{row: l.row, raw: l.raw, gen: l.gen}
}

func (c *learnedCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.gen++
}

func (c *learnedCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}
