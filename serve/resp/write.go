package resp

import (
	"bufio"
	"strconv"
)

// writer writes replies in the connection's protocol version (2 or 3).
type writer struct {
	bw    *bufio.Writer
	proto int
	num   [24]byte
}

func (w *writer) prefixed(c byte, n int64) {
	w.bw.WriteByte(c)
	w.bw.Write(strconv.AppendInt(w.num[:0], n, 10))
	w.bw.WriteString("\r\n")
}

// Simple writes a simple string (+OK).
func (w *writer) simple(s string) {
	w.bw.WriteByte('+')
	w.bw.WriteString(s)
	w.bw.WriteString("\r\n")
}

// errorMsg writes an error reply; msg must not contain CR or LF.
func (w *writer) errorMsg(msg string) {
	w.bw.WriteByte('-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		w.bw.WriteByte(c)
	}
	w.bw.WriteString("\r\n")
}

func (w *writer) int(n int64) { w.prefixed(':', n) }

func (w *writer) bulk(b []byte) {
	w.prefixed('$', int64(len(b)))
	w.bw.Write(b)
	w.bw.WriteString("\r\n")
}

func (w *writer) bulkString(s string) {
	w.prefixed('$', int64(len(s)))
	w.bw.WriteString(s)
	w.bw.WriteString("\r\n")
}

// null writes a null: $-1 in RESP2, _ in RESP3.
func (w *writer) null() {
	if w.proto == 3 {
		w.bw.WriteString("_\r\n")
		return
	}
	w.bw.WriteString("$-1\r\n")
}

func (w *writer) array(n int) { w.prefixed('*', int64(n)) }

// mapHeader starts a map of n pairs: a flat array of 2n in RESP2.
func (w *writer) mapHeader(n int) {
	if w.proto == 3 {
		w.prefixed('%', int64(n))
		return
	}
	w.array(2 * n)
}

// setHeader starts a set: an array in RESP2.
func (w *writer) setHeader(n int) {
	if w.proto == 3 {
		w.prefixed('~', int64(n))
		return
	}
	w.array(n)
}

// bool writes #t/#f in RESP3 and :1/:0 in RESP2.
func (w *writer) bool(v bool) {
	if w.proto == 3 {
		if v {
			w.bw.WriteString("#t\r\n")
		} else {
			w.bw.WriteString("#f\r\n")
		}
		return
	}
	if v {
		w.bw.WriteString(":1\r\n")
	} else {
		w.bw.WriteString(":0\r\n")
	}
}

func (w *writer) bools(vs []bool) {
	w.array(len(vs))
	for _, v := range vs {
		w.bool(v)
	}
}
