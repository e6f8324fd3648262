//go:build !linux

package resp

import (
	"io"
	"net"
)

// rawIO is Linux-only (rawio_linux.go); elsewhere connections are served
// through net.Conn.
type rawIO struct{ io.ReadWriter }

func newRawIO(net.Conn) *rawIO { return nil }

func (*rawIO) drain() {}
