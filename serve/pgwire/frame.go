package pgwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"
)

// The front end relays the messages it does not act on as they came, one
// whole message at a time: only its framing (a type byte, then a length
// that counts itself) is read here. The messages it acts on are decoded
// with pgproto3.

// frameChunk bounds how much reading a large message allocates ahead of
// the bytes received: a declared length costs nothing until its bytes come.
const frameChunk = 64 << 10

// errBadLength is a message whose length field is below its own size.
var errBadLength = errors.New("invalid message length")

// msgReader reads whole messages without decoding them.
type msgReader struct {
	br  *bufio.Reader
	buf []byte // a message larger than br's buffer
	max int    // bound on a body, 0 for none
}

// next returns the next message, type byte and length included. It is
// valid until the next call.
func (r *msgReader) next() ([]byte, error) {
	if cap(r.buf) > 1<<20 {
		r.buf = nil // the last large message is done with: do not hold its memory
	}
	h, err := r.br.Peek(5)
	if err != nil {
		if len(h) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(h[1:])))
	if n < 4 {
		return nil, errBadLength
	}
	if r.max > 0 && n-4 > r.max {
		return nil, &pgproto3.ExceededMaxBodyLenErr{MaxExpectedBodyLen: r.max, ActualBodyLen: n - 4}
	}
	total := 1 + n
	if total <= r.br.Size() {
		b, err := r.br.Peek(total)
		if err != nil {
			return nil, unexpectedEOF(err)
		}
		r.br.Discard(total)
		return b, nil
	}
	b := r.buf[:0]
	for len(b) < total {
		at := len(b)
		step := min(total-at, frameChunk)
		b = slices.Grow(b, step)[:at+step]
		r.buf = b
		if _, err := io.ReadFull(r.br, b[at:]); err != nil {
			return nil, unexpectedEOF(err)
		}
	}
	return b, nil
}

// whole reports whether a whole message is buffered: reading it will not
// wait for the network.
func (r *msgReader) whole() bool {
	n := r.br.Buffered()
	if n < 5 {
		return false
	}
	h, _ := r.br.Peek(5)
	return n >= 1+int(int32(binary.BigEndian.Uint32(h[1:])))
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// boundedReader gives pgproto3's reader (which buffers what it reads) at
// most the rest of the current startup packet, so that the bytes after it
// stay in br: a TLS handshake, or the messages the session reads itself.
type boundedReader struct {
	br   *bufio.Reader
	left int // bytes left of the current packet
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left == 0 {
		h, err := b.br.Peek(4)
		if err != nil {
			return 0, unexpectedEOF(err)
		}
		n := int(int32(binary.BigEndian.Uint32(h)))
		if n < 4 || n > 1<<20 {
			n = 4 // the length alone: pgproto3 refuses it
		}
		b.left = n
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= n
	return n, err
}

// Message types, the first byte of a message (PostgreSQL's protocol
// documentation, "Message Formats"), for the messages the front end
// routes by type before (or instead of) decoding them with pgproto3.
const (
	// From the client.
	msgQuery       = 'Q' // pgproto3.Query
	msgParse       = 'P' // pgproto3.Parse
	msgBind        = 'B' // pgproto3.Bind
	msgDescribe    = 'D' // pgproto3.Describe
	msgExecute     = 'E' // pgproto3.Execute
	msgClose       = 'C' // pgproto3.Close
	msgSync        = 'S' // pgproto3.Sync
	msgFlush       = 'H' // pgproto3.Flush
	msgTerminate   = 'X' // pgproto3.Terminate
	msgCopyData    = 'd' // pgproto3.CopyData (both ways)
	msgCopyDone    = 'c' // pgproto3.CopyDone (both ways)
	msgCopyFail    = 'f' // pgproto3.CopyFail
	msgFunctionCal = 'F' // pgproto3.FunctionCall
	msgPassword    = 'p' // pgproto3.PasswordMessage, SASLInitialResponse, SASLResponse, GSSResponse

	// From the upstream.
	msgAuthentication    = 'R' // pgproto3.Authentication*
	msgBackendKeyData    = 'K' // pgproto3.BackendKeyData
	msgParameterStatus   = 'S' // pgproto3.ParameterStatus
	msgReadyForQuery     = 'Z' // pgproto3.ReadyForQuery
	msgErrorResponse     = 'E' // pgproto3.ErrorResponse
	msgNoticeResponse    = 'N' // pgproto3.NoticeResponse
	msgNotification      = 'A' // pgproto3.NotificationResponse
	msgParseComplete     = '1' // pgproto3.ParseComplete
	msgBindComplete      = '2' // pgproto3.BindComplete
	msgCloseComplete     = '3' // pgproto3.CloseComplete
	msgNoData            = 'n' // pgproto3.NoData
	msgRowDescription    = 'T' // pgproto3.RowDescription
	msgDataRow           = 'D' // pgproto3.DataRow
	msgCommandComplete   = 'C' // pgproto3.CommandComplete
	msgEmptyQuery        = 'I' // pgproto3.EmptyQueryResponse
	msgPortalSuspended   = 's' // pgproto3.PortalSuspended
	msgCopyInResponse    = 'G' // pgproto3.CopyInResponse
	msgCopyOutResponse   = 'H' // pgproto3.CopyOutResponse
	msgCopyBothResponse  = 'W' // pgproto3.CopyBothResponse
	msgParamDescription  = 't' // pgproto3.ParameterDescription
	msgFunctionCallReply = 'V' // pgproto3.FunctionCallResponse
)

// decodeAs decodes a message's body into m, naming the message on error.
func decodeAs[M interface{ Decode([]byte) error }](raw []byte, m M) (M, error) {
	if err := m.Decode(raw[5:]); err != nil {
		return m, fmt.Errorf("%T: %w", m, err)
	}
	return m, nil
}
