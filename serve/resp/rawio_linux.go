//go:build linux

package resp

import (
	"io"
	"net"
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
// rawIO is not safe for concurrent use: each connection's goroutine owns
// its own.
type rawIO struct {
	rc  syscall.RawConn
	buf []byte // the read's or write's bytes, for the closures
	n   int
	err error

	readFn, writeFn func(fd uintptr) bool
}

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
	r.writeFn = r.write
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

func (r *rawIO) write(fd uintptr) bool {
	for r.n < len(r.buf) {
		rest := r.buf[r.n:]
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch errno {
		case 0:
			r.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the socket's buffer is full: wait, then go on
		default:
			r.err = &net.OpError{Op: "write", Net: "tcp", Err: errno}
			return true
		}
	}
	return true
}

// Write writes all of p (io.Writer).
func (r *rawIO) Write(p []byte) (int, error) {
	r.buf, r.n, r.err = p, 0, nil
	err := r.rc.Write(r.writeFn)
	n, werr := r.n, r.err
	r.buf = nil
	if err != nil {
		return n, err
	}
	return n, werr
}
