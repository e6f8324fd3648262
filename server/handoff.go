package server

import (
	"errors"
	"net"
	"sync"
	"time"
)

// handoff accepts on a listener and hands each connection to the newest of
// the listeners next returned, so that one server can take over a
// listener's new connections from another while the other's connections
// go on (the PostgreSQL front end: relay-only while the sets connect, then
// the one with checked answer statements).
type handoff struct {
	ln net.Listener

	mu     sync.Mutex
	cur    *handoffLn
	closed bool
}

func newHandoff(ln net.Listener) *handoff { return &handoff{ln: ln} }

// next returns a listener that receives the new connections from now on,
// and closes the one before it.
func (h *handoff) next() net.Listener {
	v := &handoffLn{addr: h.ln.Addr(), ch: make(chan net.Conn), done: make(chan struct{})}
	h.mu.Lock()
	old := h.cur
	if h.closed {
		v.Close()
	} else {
		h.cur = v
	}
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return v
}

func (h *handoff) current() *handoffLn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

// run accepts until the listener is closed.
func (h *handoff) run() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			h.close()
			return
		}
		h.deliver(c)
	}
}

func (h *handoff) deliver(c net.Conn) {
	for {
		v := h.current()
		select {
		case v.ch <- c:
			return
		case <-v.done:
			if h.current() == v { // closed, not replaced
				c.Close()
				return
			}
		}
	}
}

// close closes the listener and the current handed-off one.
func (h *handoff) close() {
	h.mu.Lock()
	h.closed = true
	cur := h.cur
	h.mu.Unlock()
	h.ln.Close()
	if cur != nil {
		cur.Close()
	}
}

// handoffLn is one server's side of a handoff.
type handoffLn struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (v *handoffLn) Accept() (net.Conn, error) {
	select {
	case c := <-v.ch:
		return c, nil
	case <-v.done:
		return nil, net.ErrClosed
	}
}

func (v *handoffLn) Close() error {
	v.once.Do(func() { close(v.done) })
	return nil
}

func (v *handoffLn) Addr() net.Addr { return v.addr }
