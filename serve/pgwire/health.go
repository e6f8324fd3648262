package pgwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// UpstreamStatus is the last check of the upstream: a connection, an
// SSLRequest and its answer (with TLS configured, the handshake too), no
// authentication. It is what /readyz shows for the front end.
type UpstreamStatus struct {
	Ready bool   `json:"ready"`
	Addr  string `json:"addr"`
	// LatencySeconds is the check's round trip.
	LatencySeconds float64   `json:"latency_seconds"`
	CheckedAt      time.Time `json:"checked_at"`
	// Error says why the upstream is not ready: the check's error, or a
	// session's failed connection since.
	Error string `json:"error,omitempty"`
}

// upstreamHealth holds the last UpstreamStatus.
type upstreamHealth struct {
	mu     sync.Mutex
	status UpstreamStatus
}

func (h *upstreamHealth) set(st UpstreamStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status = st
}

func (h *upstreamHealth) get() UpstreamStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status
}

// failed records a session's failed connection: not ready until the next
// check succeeds.
func (h *upstreamHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status.Ready = false
	h.status.Error = err.Error()
}

// Upstream returns the last check of the upstream. Before the first check
// ends it is not ready.
func (s *Server) Upstream() UpstreamStatus { return s.health.get() }

// Readiness reports whether the upstream answered its last check, and the
// check, for /readyz.
func (s *Server) Readiness() (bool, any) {
	st := s.health.get()
	return st.Ready, st
}

// CheckUpstream checks the upstream now (see UpstreamStatus) and records
// the result.
func (s *Server) CheckUpstream(ctx context.Context) error {
	start := time.Now()
	err := s.probe(ctx)
	st := UpstreamStatus{Ready: err == nil, Addr: s.up.addr, LatencySeconds: time.Since(start).Seconds(), CheckedAt: start}
	if err != nil {
		st.Error = err.Error()
	}
	s.health.set(st)
	return err
}

func (s *Server) probe(ctx context.Context) error {
	c, err := s.dialUpstream(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if s.up.tls != nil {
		return nil // the SSLRequest was answered and TLS set up
	}
	c.SetDeadline(time.Now().Add(s.cfg.DialTimeout))
	req, _ := (&pgproto3.SSLRequest{}).Encode(nil)
	var b [1]byte
	if _, err := c.Write(req); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("no answer to an SSLRequest: %w", err)
	}
	if b[0] != 'S' && b[0] != 'N' {
		return errors.New("the upstream does not speak PostgreSQL's protocol")
	}
	return nil
}

// checkLoop checks the upstream every UpstreamCheckInterval until done.
func (s *Server) checkLoop(done <-chan struct{}) {
	t := time.NewTicker(s.cfg.UpstreamCheckInterval)
	defer t.Stop()
	for {
		s.CheckUpstream(context.Background())
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}
