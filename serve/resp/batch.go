package resp

// Pipelined runs of one command on one key (BF.ADD, BF.EXISTS, CF.EXISTS:
// redis-benchmark -P, a client's pipeline of adds) are answered as one batch:
// the items of the commands already received go to the store in one call, so
// a run of BF.ADDs costs one log record (one write, one fsync under
// appendfsync always) instead of one each, and a run of BF.EXISTS hashes and
// fetches its blocks together. Each command still gets its own reply, the one
// it would get alone.

// maxBatch bounds the items of one batch.
const maxBatch = 1024

// gather returns the item of the command args (name key item) followed by
// the items of the commands after it that are already buffered, complete, and
// the same command on the same key. Those commands are consumed and counted.
// The items stay valid until the next read.
func (c *conn) gather(args [][]byte) [][]byte {
	clear(c.items[:cap(c.items)]) // pin no earlier request's bytes
	items := append(c.items[:0], args[2])
	defer func() { c.items = items[:0] }()
	br := c.r.br
	for len(items) < maxBatch && br.Buffered() > 0 {
		buf, _ := br.Peek(br.Buffered()) // no read: only what is buffered
		next, n, ok := peekCommand3(buf, c.r.maxBulk)
		if !ok || !eqFold(next[0], c.cmd) || string(next[1]) != string(args[1]) {
			break
		}
		items = append(items, next[2])
		br.Discard(n)
		c.s.commands.Add(1)
	}
	return items
}

// peekCommand3 parses a complete RESP array of three bulk strings at the
// start of b, strictly ("*3\r\n" then "$<len>\r\n<bytes>\r\n" three times,
// each length at most maxBulk), and returns the arguments (slices of b) and
// the bytes it takes. Anything else, complete or not, is not ok: the
// connection's reader then reads it as usual, with its errors.
func peekCommand3(b []byte, maxBulk int64) (args [3][]byte, n int, ok bool) {
	if len(b) < 4 || string(b[:4]) != "*3\r\n" {
		return args, 0, false
	}
	i := 4
	for a := range args {
		if i >= len(b) || b[i] != '$' {
			return args, 0, false
		}
		i++
		var l int64
		digits := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			l = l*10 + int64(b[i]-'0')
			i++
			digits++
			if digits > 10 || l > maxBulk {
				return args, 0, false
			}
		}
		if digits == 0 || len(b)-i < 2 || b[i] != '\r' || b[i+1] != '\n' {
			return args, 0, false
		}
		i += 2
		if int64(len(b)-i) < l+2 {
			return args, 0, false
		}
		end := i + int(l)
		if b[end] != '\r' || b[end+1] != '\n' {
			return args, 0, false
		}
		args[a] = b[i:end:end]
		i = end + 2
	}
	return args, i, true
}
