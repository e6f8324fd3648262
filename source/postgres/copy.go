package postgres

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrCopyFormat reports COPY text output that this decoder cannot read.
var ErrCopyFormat = errors.New("postgres: malformed COPY text data")

// maxLine bounds one row of COPY output held in memory while waiting for its
// end (PostgreSQL itself caps a field at 1 GB).
const maxLine = 64 << 20

// copyDecoder is the io.Writer COPY TO STDOUT writes into. It splits the text
// format into rows (one column each), undoes its backslash escapes, skips
// NULL (\N) and hands each key to fn.
type copyDecoder struct {
	fn      func([]byte) error
	partial []byte // a row split across writes
	scratch []byte
	Rows    int64
	Nulls   int64
	err     error // fn's error, kept to return it unwrapped
}

func (d *copyDecoder) Write(p []byte) (int, error) {
	n := len(p)
	if len(d.partial) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(d.partial)+len(p) > maxLine {
				return 0, fmt.Errorf("%w: row longer than %d bytes", ErrCopyFormat, maxLine)
			}
			d.partial = append(d.partial, p...)
			return n, nil
		}
		d.partial = append(d.partial, p[:i]...)
		if err := d.row(d.partial); err != nil {
			return 0, err
		}
		d.partial = d.partial[:0]
		p = p[i+1:]
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(p) > maxLine {
				return 0, fmt.Errorf("%w: row longer than %d bytes", ErrCopyFormat, maxLine)
			}
			d.partial = append(d.partial, p...)
			break
		}
		if err := d.row(p[:i]); err != nil {
			return 0, err
		}
		p = p[i+1:]
	}
	return n, nil
}

// finish reports an unterminated last row.
func (d *copyDecoder) finish() error {
	if len(d.partial) > 0 {
		return fmt.Errorf("%w: last row has no newline", ErrCopyFormat)
	}
	return nil
}

func (d *copyDecoder) row(line []byte) error {
	d.Rows++
	if len(line) == 2 && line[0] == '\\' && line[1] == 'N' {
		d.Nulls++
		return nil
	}
	key, err := unescape(d.scratch[:0], line)
	if err != nil {
		return err
	}
	d.scratch = key
	if err := d.fn(key); err != nil {
		d.err = err
		return err
	}
	return nil
}

// unescape decodes one field of COPY's text format: backslash escapes \b \f
// \n \r \t \v \\, octal \ooo and hex \xhh. A raw tab separates columns, which
// a one-column query never has.
func unescape(dst, s []byte) ([]byte, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		if bytes.IndexByte(s, '\t') >= 0 {
			return nil, fmt.Errorf("%w: more than one column", ErrCopyFormat)
		}
		return s, nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\t' {
			return nil, fmt.Errorf("%w: more than one column", ErrCopyFormat)
		}
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i == len(s) {
			return nil, fmt.Errorf("%w: trailing backslash", ErrCopyFormat)
		}
		switch c = s[i]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'v':
			dst = append(dst, '\v')
		case 'x':
			v, n := 0, 0
			for n < 2 && i+1 < len(s) && hexVal(s[i+1]) >= 0 {
				v = v*16 + hexVal(s[i+1])
				i++
				n++
			}
			if n == 0 {
				dst = append(dst, 'x') // PostgreSQL reads a bare \x as x
				continue
			}
			dst = append(dst, byte(v))
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for n := 1; n < 3 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; n++ {
				v = v*8 + int(s[i+1]-'0')
				i++
			}
			dst = append(dst, byte(v))
		case 'N':
			return nil, fmt.Errorf("%w: \\N inside a value", ErrCopyFormat)
		default:
			dst = append(dst, c) // \\ and any other escaped character stand for themselves
		}
	}
	return dst, nil
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
