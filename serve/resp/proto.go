package resp

import (
	"bufio"
	"errors"
	"io"
	"strconv"
)

// protocolError is a malformed request. The server replies with its text
// ("ERR Protocol error: …", as Redis) and closes that connection.
type protocolError struct{ Msg string }

func (e *protocolError) Error() string { return "ERR Protocol error: " + e.Msg }

// reader parses requests: RESP arrays of bulk strings, and inline commands
// (a line of space-separated words, with "double" and 'single' quotes as
// redis-cli writes them).
type reader struct {
	br        *bufio.Reader
	maxBulk   int64
	maxArgs   int
	maxInline int

	arena []byte
	offs  []int
	args  [][]byte
	crlf  [2]byte // a bulk string's end (a local would escape to io.ReadFull: one allocation a bulk)
}

// readChunk bounds how much one read of a bulk string allocates ahead of
// the bytes actually received.
const readChunk = 64 << 10

// next reads one command. The returned slices are valid until the next call.
// An empty command (blank inline line, "*0") returns no args and no error.
func (r *reader) next() ([][]byte, error) {
	r.arena, r.offs, r.args = r.arena[:0], r.offs[:0], r.args[:0]
	if cap(r.arena) > 1<<20 {
		r.arena = nil // do not pin a huge buffer after one large command
	}
	line, err := r.line(r.maxInline, "too big inline request")
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		return r.inline(line)
	}
	n, ok := parseInt(line[1:])
	if !ok || n > int64(r.maxArgs) {
		return nil, &protocolError{"invalid multibulk length"}
	}
	for i := int64(0); i < n; i++ {
		if err := r.bulk(); err != nil {
			return nil, err
		}
	}
	return r.finish(), nil
}

// line reads a line up to CRLF (or LF) and returns it without the ending.
func (r *reader) line(limit int, tooBig string) ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > limit {
		return nil, &protocolError{tooBig}
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, nil
}

func (r *reader) bulk() error {
	hdr, err := r.line(64, "invalid bulk length")
	if err != nil {
		return err
	}
	if len(hdr) == 0 || hdr[0] != '$' {
		c := "?"
		if len(hdr) > 0 {
			c = string(hdr[:1])
		}
		return &protocolError{"expected '$', got '" + c + "'"}
	}
	n, ok := parseInt(hdr[1:])
	if !ok || n < 0 || n > r.maxBulk {
		return &protocolError{"invalid bulk length"}
	}
	start := len(r.arena)
	for left := n; left > 0; {
		step := min(left, readChunk)
		at := len(r.arena)
		r.arena = append(r.arena, make([]byte, step)...)
		if _, err := io.ReadFull(r.br, r.arena[at:]); err != nil {
			return unexpected(err)
		}
		left -= step
	}
	if _, err := io.ReadFull(r.br, r.crlf[:]); err != nil {
		return unexpected(err)
	}
	if r.crlf != [2]byte{'\r', '\n'} {
		return &protocolError{"bulk string not terminated by CRLF"}
	}
	r.offs = append(r.offs, start, len(r.arena))
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *reader) finish() [][]byte {
	for i := 0; i < len(r.offs); i += 2 {
		r.args = append(r.args, r.arena[r.offs[i]:r.offs[i+1]:r.offs[i+1]])
	}
	return r.args
}

// inline splits an inline command line.
func (r *reader) inline(line []byte) ([][]byte, error) {
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		if len(r.offs)/2 >= r.maxArgs {
			return nil, &protocolError{"too many arguments"}
		}
		start := len(r.arena)
		var err error
		switch line[i] {
		case '"':
			i, err = r.quoted(line, i+1, '"')
		case '\'':
			i, err = r.quoted(line, i+1, '\'')
		default:
			for i < len(line) && !isSpace(line[i]) {
				r.arena = append(r.arena, line[i])
				i++
			}
		}
		if err != nil {
			return nil, err
		}
		r.offs = append(r.offs, start, len(r.arena))
	}
	return r.finish(), nil
}

// quoted copies a quoted word starting after its opening quote q and
// returns the index after the closing quote.
func (r *reader) quoted(line []byte, i int, q byte) (int, error) {
	for i < len(line) {
		c := line[i]
		switch {
		case c == q:
			if i+1 < len(line) && !isSpace(line[i+1]) {
				return 0, &protocolError{"unbalanced quotes in request"}
			}
			return i + 1, nil
		case c == '\\' && q == '"' && i+1 < len(line):
			i++
			switch e := line[i]; e {
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case 'a':
				c = '\a'
			case 'x':
				if i+2 < len(line) {
					if v, err := strconv.ParseUint(string(line[i+1:i+3]), 16, 8); err == nil {
						c = byte(v)
						i += 2
						break
					}
				}
				c = 'x'
			default:
				c = e
			}
		case c == '\\' && q == '\'' && i+1 < len(line) && line[i+1] == '\'':
			i++
			c = '\''
		}
		r.arena = append(r.arena, c)
		i++
	}
	return 0, &protocolError{"unbalanced quotes in request"}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// parseInt parses a decimal integer strictly (no sign but '-', no spaces,
// no overflow).
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	return v, err == nil
}
