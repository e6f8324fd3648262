// Package resp serves a serve.Store over the Redis protocol: RESP2, and RESP3
// after HELLO 3, with RedisBloom's BF.* and CF.* commands and replies, the
// commands stock clients send to connect (PING, HELLO, AUTH, SELECT 0,
// CLIENT, COMMAND, INFO, …), BG.EXISTS, and BG.X* on expiring keys (see
// windowcmds.go).
//
// The parser is this package's own (see proto.go): it enforces the limits in
// Config and answers a malformed request with "-ERR Protocol error: …"
// before closing that connection only. Each connection runs in one
// goroutine; replies to pipelined commands are flushed once per batch, and
// a pipelined run of BF.ADD, BF.EXISTS or CF.EXISTS on one key goes to the
// store in one call (see batch.go).
//
// A Server is safe for concurrent use. docs/serve.md lists every command and
// where it differs from RedisBloom.
package resp

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/serve"
)

// Config configures a Server. The zero value of every field but Store means
// its default.
type Config struct {
	// Store is the keyspace served. Required.
	Store *serve.Store
	// Password, if set, must be given with AUTH (or HELLO … AUTH) before any
	// other command. The user name, when given, must be "default".
	// Default: "" — no authentication.
	Password string
	// TLSConfig, if set, makes Serve speak TLS. Default: nil, plain TCP.
	TLSConfig *tls.Config
	// MaxConns bounds concurrent connections; more are answered with
	// "-ERR max number of clients reached" and closed. With a Password it
	// bounds authenticated connections (an AUTH past it gets that reply),
	// and connections not yet authenticated count against MaxPreAuthConns
	// instead, so strangers never lock out a client that has the password.
	// Default: 10000.
	MaxConns int
	// MaxPreAuthConns bounds the connections that have not authenticated
	// yet (with a Password). When a new one would pass it, the oldest of them
	// is closed to make room. Default: 128.
	MaxPreAuthConns int
	// PreAuthTimeout closes a connection that has not authenticated this
	// long after it was accepted (with a Password). Default: 10 seconds.
	PreAuthTimeout time.Duration
	// AuthFailureDelay delays the reply to a wrong password (AUTH or HELLO
	// AUTH), doubling with each further failure on the connection, up to 32
	// times it. Default: 100 ms.
	AuthFailureDelay time.Duration
	// MaxBulkLen bounds one argument. Default: 512 MiB (Redis'
	// proto-max-bulk-len). Before authentication the bound is 16 KiB.
	MaxBulkLen int64
	// MaxArgs bounds the arguments of one command. Default: 1,048,576.
	// Before authentication the bound is 10.
	MaxArgs int
	// MaxInlineLen bounds an inline command line. Default: 64 KiB.
	MaxInlineLen int
	// IdleTimeout closes a connection that sends nothing for this long.
	// Default: 0, never (as Redis' timeout 0).
	IdleTimeout time.Duration
	// Logger receives connection errors. Default: discard.
	Logger *slog.Logger
}

const (
	defaultMaxConns       = 10000
	defaultMaxPreAuth     = 128
	defaultPreAuthTimeout = 10 * time.Second
	defaultAuthDelay      = 100 * time.Millisecond
	maxAuthDelayFactor    = 32
	defaultMaxBulk        = 512 << 20
	defaultMaxArgs        = 1 << 20
	defaultMaxInline      = 64 << 10
	preAuthMaxBulk        = 16 << 10
	preAuthMaxArgs        = 10
	readBufferSize        = 64 << 10
)

// Server is a Redis protocol server. It is safe for concurrent use.
type Server struct {
	cfg   Config
	store *serve.Store

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	preAuth   map[*conn]struct{} // connections in slotPreAuth
	authedN   int                // connections in slotAuthed
	shutdown  atomic.Bool
	wg        sync.WaitGroup

	nextID   atomic.Int64
	active   atomic.Int64
	total    atomic.Uint64
	rejected atomic.Uint64
	commands atomic.Uint64

	plainIO bool // serve through net.Conn's Read and Write only (tests of that path)
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("resp: server closed")

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("resp: Config.Store is required")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.MaxBulkLen == 0 {
		cfg.MaxBulkLen = defaultMaxBulk
	}
	if cfg.MaxArgs == 0 {
		cfg.MaxArgs = defaultMaxArgs
	}
	if cfg.MaxInlineLen == 0 {
		cfg.MaxInlineLen = defaultMaxInline
	}
	if cfg.MaxPreAuthConns == 0 {
		cfg.MaxPreAuthConns = defaultMaxPreAuth
	}
	if cfg.PreAuthTimeout == 0 {
		cfg.PreAuthTimeout = defaultPreAuthTimeout
	}
	if cfg.AuthFailureDelay == 0 {
		cfg.AuthFailureDelay = defaultAuthDelay
	}
	if cfg.MaxConns < 0 || cfg.MaxBulkLen < 0 || cfg.MaxArgs < 0 || cfg.MaxInlineLen < 0 || cfg.IdleTimeout < 0 ||
		cfg.MaxPreAuthConns < 0 || cfg.PreAuthTimeout < 0 || cfg.AuthFailureDelay < 0 {
		return nil, errors.New("resp: negative limit in Config")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Server{cfg: cfg, store: cfg.Store, listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
		preAuth: map[*conn]struct{}{}}, nil
}

// Stats are the server's counters.
type Stats struct {
	Connections         int64  // open now
	ConnectionsTotal    uint64 // accepted since start
	ConnectionsRejected uint64 // refused by MaxConns, or closed to make room under MaxPreAuthConns
	Commands            uint64 // commands processed
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{s.active.Load(), s.total.Load(), s.rejected.Load(), s.commands.Load()}
}

// Serve accepts connections on ln until Shutdown or Close and returns
// ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.TLSConfig != nil {
		ln = tls.NewListener(ln, s.cfg.TLSConfig)
	}
	s.mu.Lock()
	if s.shutdown.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	retry := backoff.Backoff{Min: 5 * time.Millisecond, Max: time.Second} // as net/http's accept loop
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(retry.Next())
				continue
			}
			return err
		}
		retry.Reset()
		s.total.Add(1)
		if s.cfg.Password == "" && s.active.Load() >= int64(s.cfg.MaxConns) {
			s.rejected.Add(1)
			nc.Write([]byte("-ERR max number of clients reached\r\n"))
			nc.Close()
			continue
		}
		c := s.newConn(nc)
		s.mu.Lock()
		if s.shutdown.Load() {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		if s.cfg.Password != "" {
			s.admitPreAuth(c)
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.active.Add(1)
		go c.serve()
	}
}

// Connection slots, with a Password: a connection counts against
// MaxPreAuthConns until it authenticates, then against MaxConns.
type slot uint8

const (
	slotNone    slot = iota // not counted: no Password, or closed to make room
	slotPreAuth             // in Server.preAuth
	slotAuthed              // counted in Server.authedN
)

// admitPreAuth counts c as unauthenticated, first closing the oldest
// unauthenticated connection when MaxPreAuthConns are open. Call with s.mu
// held.
func (s *Server) admitPreAuth(c *conn) {
	if len(s.preAuth) >= s.cfg.MaxPreAuthConns {
		var oldest *conn
		for o := range s.preAuth {
			if oldest == nil || o.id < oldest.id {
				oldest = o
			}
		}
		delete(s.preAuth, oldest)
		oldest.slot = slotNone
		oldest.nc.Close()
		s.rejected.Add(1)
	}
	s.preAuth[c] = struct{}{}
	c.slot = slotPreAuth
}

// errMaxClients refuses an AUTH past MaxConns.
var errMaxClients = errors.New("max number of clients reached")

// promote moves c from the unauthenticated to the authenticated
// connections, failing with errMaxClients when MaxConns are authenticated.
// A connection closed to make room (slotNone) fails with net.ErrClosed.
func (c *conn) promote() error {
	s := c.s
	if s.cfg.Password == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch c.slot {
	case slotAuthed:
		return nil
	case slotNone:
		return net.ErrClosed
	}
	if s.authedN >= s.cfg.MaxConns {
		s.rejected.Add(1)
		return errMaxClients
	}
	delete(s.preAuth, c)
	s.authedN++
	c.slot = slotAuthed
	return nil
}

// demote counts c as unauthenticated again (RESET), with a new pre-auth
// deadline.
func (c *conn) demote() {
	s := c.s
	if s.cfg.Password == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.slot == slotAuthed {
		s.authedN--
		s.admitPreAuth(c)
	}
	c.accepted = time.Now()
}

// release uncounts c when it closes. Call with s.mu held.
func (c *conn) release() {
	switch c.slot {
	case slotPreAuth:
		delete(c.s.preAuth, c)
	case slotAuthed:
		c.s.authedN--
	}
	c.slot = slotNone
}

// authFailed delays the reply to a wrong password: AuthFailureDelay, doubled
// for each earlier failure on the connection, up to 32 times it.
func (c *conn) authFailed() {
	d := c.s.cfg.AuthFailureDelay << min(c.authFailures, 5)
	c.authFailures++
	time.Sleep(min(d, maxAuthDelayFactor*c.s.cfg.AuthFailureDelay))
}

// Shutdown stops accepting connections, lets every connection finish the
// commands it has received, closes it, and waits for that or for ctx.
// When ctx ends first, the remaining connections are closed at once and
// ctx's error is returned. Shutdown is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	clear(s.listeners)
	for c := range s.conns {
		c.interrupt()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.closeConns()
		<-done
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once. It is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shutdown.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	clear(s.listeners)
	s.mu.Unlock()
	s.closeConns()
	s.wg.Wait()
	return nil
}

func (s *Server) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.nc.Close()
	}
}

// conn is one client connection.
type conn struct {
	s            *Server
	nc           net.Conn
	raw          *rawIO // nil when served through net.Conn
	r            reader
	w            writer
	id           int64
	name         string
	authed       bool
	quit         bool
	accepted     time.Time // start of the pre-auth deadline
	authFailures int
	hadDeadline  bool
	slot         slot     // under s.mu
	cmd          string   // the command being answered, lower case
	items        [][]byte // gather's batch, reused
	flags        []bool   // a command's replies from the store, reused (keepFlags)
}

func (s *Server) newConn(nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, id: s.nextID.Add(1), authed: s.cfg.Password == "", accepted: time.Now()}
	var rw io.ReadWriter = nc
	if raw := newRawIO(nc); raw != nil && !s.plainIO {
		rw, c.raw = raw, raw
	}
	c.r = reader{br: bufio.NewReaderSize(rw, readBufferSize), maxInline: s.cfg.MaxInlineLen}
	c.w = writer{bw: bufio.NewWriterSize(rw, 16<<10), proto: 2}
	c.setLimits()
	return c
}

func (c *conn) setLimits() {
	if c.authed {
		c.r.maxBulk, c.r.maxArgs = c.s.cfg.MaxBulkLen, c.s.cfg.MaxArgs
	} else {
		c.r.maxBulk, c.r.maxArgs = preAuthMaxBulk, preAuthMaxArgs
	}
}

// close closes the connection from its own goroutine once the replies
// queued for it are written (or cannot be).
func (c *conn) close() {
	if c.raw != nil {
		c.raw.drain()
	}
	c.nc.Close()
}

// interrupt makes a connection blocked in a read return, so it can finish.
func (c *conn) interrupt() { c.nc.SetReadDeadline(time.Now()) }

func (c *conn) serve() {
	defer func() {
		c.close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.release()
		c.s.mu.Unlock()
		c.s.active.Add(-1)
		c.s.wg.Done()
	}()
	for !c.quit {
		if c.r.br.Buffered() == 0 && !c.s.shutdown.Load() {
			c.setDeadline()
		}
		if c.s.shutdown.Load() && c.r.br.Buffered() == 0 {
			break
		}
		args, err := c.r.next()
		if err != nil {
			var pe *protocolError
			if errors.As(err, &pe) {
				c.w.errorMsg(pe.Error())
				c.w.bw.Flush()
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
				c.s.cfg.Logger.Debug("resp: read failed", "remote", c.nc.RemoteAddr(), "err", err)
			}
			break
		}
		if len(args) > 0 {
			c.s.commands.Add(1)
			c.dispatch(args)
		}
		if c.r.br.Buffered() == 0 || c.quit {
			if err := c.w.bw.Flush(); err != nil {
				break
			}
		}
	}
	c.w.bw.Flush()
}

// setDeadline sets the read deadline: IdleTimeout from now, and before
// authentication no later than PreAuthTimeout after the connection was
// accepted.
func (c *conn) setDeadline() {
	var dl time.Time
	if c.s.cfg.IdleTimeout > 0 {
		dl = time.Now().Add(c.s.cfg.IdleTimeout)
	}
	if !c.authed {
		if pre := c.accepted.Add(c.s.cfg.PreAuthTimeout); dl.IsZero() || pre.Before(dl) {
			dl = pre
		}
	}
	if !dl.IsZero() || c.hadDeadline {
		c.nc.SetReadDeadline(dl)
	}
	c.hadDeadline = !dl.IsZero()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkPassword compares in constant time.
func (s *Server) checkPassword(user, pass string) bool {
	if user != "" && user != "default" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(pass), []byte(s.cfg.Password)) == 1
}
