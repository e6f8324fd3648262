package pgwire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// ErrUpstreamTLS is returned when the upstream refuses TLS that
// Config.Upstream requires (sslmode=require or stronger).
var ErrUpstreamTLS = errors.New("pgwire: the upstream PostgreSQL refused TLS")

// upstream is a parsed Config.Upstream.
type upstream struct {
	addr   string      // host:port
	tls    *tls.Config // nil: plain text
	prefer bool        // with tls: continue in plain text when the upstream refuses TLS
}

// CheckUpstream reports whether s is a valid Config.Upstream, and why not.
func CheckUpstream(s string) error {
	_, err := parseUpstream(s)
	return err
}

// parseUpstream reads host:port (plain text), or a PostgreSQL URL or
// keyword/value string, of which the host, the port and the ssl*
// parameters are used, as libpq reads them (pgconn.ParseConfig; PGSSLMODE
// and the like apply where the string does not say).
func parseUpstream(s string) (upstream, error) {
	if !strings.Contains(s, "://") && !strings.Contains(s, "=") {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return upstream{}, fmt.Errorf("pgwire: upstream %q: want host:port or a postgres:// URL", s)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return upstream{}, fmt.Errorf("pgwire: upstream %q: bad port", s)
		}
		return upstream{addr: s}, nil
	}
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		return upstream{}, fmt.Errorf("pgwire: upstream: %w", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return upstream{}, fmt.Errorf("pgwire: upstream: a Unix socket (%s) is not supported: give a TCP host", cfg.Host)
	}
	if cfg.SSLNegotiation == "direct" {
		return upstream{}, errors.New("pgwire: upstream: sslnegotiation=direct is not supported")
	}
	u := upstream{addr: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), tls: cfg.TLSConfig}
	for _, fb := range cfg.Fallbacks {
		// sslmode=prefer: a fallback in plain text to the same host.
		if fb.Host == cfg.Host && fb.Port == cfg.Port && fb.TLSConfig == nil && u.tls != nil {
			u.prefer = true
		}
	}
	return u, nil
}

// dialUpstream connects to the upstream, negotiating TLS as
// Config.Upstream asks, within DialTimeout.
func (s *Server) dialUpstream(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.up.addr)
	if err != nil {
		return nil, err
	}
	if s.up.tls == nil {
		return c, nil
	}
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	req, _ := (&pgproto3.SSLRequest{}).Encode(nil)
	var b [1]byte
	if _, err = c.Write(req); err == nil {
		_, err = io.ReadFull(c, b[:])
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("SSL request: %w", err)
	}
	switch b[0] {
	case 'S':
		tc := tls.Client(c, s.up.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS: %w", err)
		}
		c.SetDeadline(time.Time{})
		return tc, nil
	case 'N':
		if s.up.prefer {
			c.SetDeadline(time.Time{})
			return c, nil
		}
		c.Close()
		return nil, ErrUpstreamTLS
	}
	c.Close()
	return nil, fmt.Errorf("SSL request: unexpected answer %q", b[0])
}
