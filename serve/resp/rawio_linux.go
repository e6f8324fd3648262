//go:build linux

package resp

import (
	"io"
	"net"
	"sync"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a TCP connection's socket with syscall.RawSyscall
// inside its syscall.RawConn, instead of net.Conn's Read and Write.
//
// Why: unpipelined, a connection costs about three system calls per
// request (the read with the request, the reply's write, and the read that
// finds nothing before the goroutine waits). Through net.Conn each is a
// syscall.Syscall, which marks the goroutine's processor as in a system
// call (entersyscall/exitsyscall); with that, the runtime's sysmon thread
// keeps waking every 20 µs to look for processors to take back from calls
// that block, and a call entered while it sleeps wakes it. The socket is
// non-blocking (the runtime's netpoller waits for it), so these calls never
// block: raw calls are safe, and sysmon then backs off to its long sleeps.
// Waiting still goes through the netpoller (RawConn.Read and Write), so
// read deadlines, Close and Shutdown's interrupt work as with net.Conn.
//
// Replies the client does not read yet are not waited for: what the socket
// does not take at once is queued and written by a goroutine of the
// connection's (started then, ended when the queue is empty), while the
// connection goes on reading requests, as redis-server buffers a client's
// output. Otherwise a client that writes a whole pipeline before reading
// its replies (redis-py's pipelines do) would wait for the server to read
// while the server waits for it to read: both socket buffers full, forever.
// Past maxQueued bytes queued, Write waits for the queue.
//
// Read and Write are called by the connection's goroutine only.
type rawIO struct {
	rc  syscall.RawConn
	buf []byte // the read's bytes, for readFn
	n   int
	err error

	readFn func(fd uintptr) bool
	direct sockWrite // the connection goroutine's, without waiting
	queue  sockWrite // the writer's

	mu      sync.Mutex
	cond    sync.Cond
	queued  []byte // written by Write, not yet by the socket
	spare   []byte // the queue's other buffer
	writing bool   // the writer goroutine runs: Write queues
	werr    error  // the writer's failure: every later Write returns it
}

// maxQueued bounds the replies a connection queues for a client that does
// not read them.
const maxQueued = 64 << 20

// newRawIO returns raw I/O for nc when it is a plain TCP connection, nil
// otherwise (TLS, other conns: served through net.Conn).
func newRawIO(nc net.Conn) *rawIO {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{rc: rc}
	r.readFn = r.read
	r.direct.fn = r.direct.write
	r.queue.fn, r.queue.block = r.queue.write, true
	r.cond.L = &r.mu
	return r
}

func (r *rawIO) read(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.buf))), uintptr(len(r.buf)))
		switch errno {
		case 0:
			r.n = int(n)
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait in the netpoller, then call again
		default:
			r.err = &net.OpError{Op: "read", Net: "tcp", Err: errno}
			return true
		}
	}
}

// Read reads once into p (io.Reader).
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.buf, r.n, r.err = p, 0, nil
	err := r.rc.Read(r.readFn)
	n, rerr := r.n, r.err
	r.buf = nil
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// sockWrite is one write's state, for the closures RawConn.Write calls:
// the connection's goroutine and the writer each have their own.
type sockWrite struct {
	buf   []byte
	n     int
	err   error
	block bool // wait for the socket (else stop at EAGAIN, err errWouldBlock)
	fn    func(fd uintptr) bool
}

func (w *sockWrite) write(fd uintptr) bool {
	for w.n < len(w.buf) {
		rest := w.buf[w.n:]
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch errno {
		case 0:
			w.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			if w.block {
				return false // the socket's buffer is full: wait, then go on
			}
			w.err = errWouldBlock
			return true
		default:
			w.err = &net.OpError{Op: "write", Net: "tcp", Err: errno}
			return true
		}
	}
	return true
}

// run writes buf through rc and returns how much was written.
func (w *sockWrite) run(rc syscall.RawConn, buf []byte) (int, error) {
	w.buf, w.n, w.err = buf, 0, nil
	err := rc.Write(w.fn)
	n := w.n
	if err == nil {
		err = w.err
	}
	w.buf = nil
	return n, err
}

// errWouldBlock is a non-blocking write's "the socket took no more".
var errWouldBlock = syscall.EAGAIN

// Write writes all of p, or queues what the socket does not take now
// (io.Writer); an error is the socket's, or the writer's before it.
func (r *rawIO) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.werr != nil {
		err := r.werr
		r.mu.Unlock()
		return 0, err
	}
	if r.writing {
		for len(r.queued) >= maxQueued && r.werr == nil {
			r.cond.Wait()
		}
		if r.werr != nil {
			err := r.werr
			r.mu.Unlock()
			return 0, err
		}
		r.queued = append(r.queued, p...)
		r.mu.Unlock()
		return len(p), nil
	}
	r.mu.Unlock()
	// Nothing queued: write directly, the writer is not running.
	n, err := r.direct.run(r.rc, p)
	if err != nil && err != errWouldBlock {
		return n, err
	}
	if n == len(p) {
		return n, nil
	}
	r.mu.Lock()
	r.queued = append(r.queued, p[n:]...)
	r.writing = true
	r.mu.Unlock()
	go r.writer()
	return len(p), nil
}

// writer writes the queue until it is empty, waiting for the socket.
func (r *rawIO) writer() {
	r.mu.Lock()
	for len(r.queued) > 0 && r.werr == nil {
		out := r.queued
		r.queued = r.spare[:0]
		r.mu.Unlock()
		_, err := r.queue.run(r.rc, out)
		r.mu.Lock()
		r.spare = out[:0]
		if cap(r.spare) > 1<<20 {
			r.spare = nil // do not hold a large queue's memory
		}
		if err != nil {
			r.werr = err
		}
		r.cond.Broadcast()
	}
	r.writing = false
	r.queued = nil
	r.cond.Broadcast()
	r.mu.Unlock()
}

// drain waits until every queued reply is written (or writing failed).
func (r *rawIO) drain() {
	r.mu.Lock()
	for r.writing {
		r.cond.Wait()
	}
	r.mu.Unlock()
}
