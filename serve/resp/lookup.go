package resp

import "github.com/bloomgate/bloomgate/serve"

// mayContain answers BF.EXISTS and CF.EXISTS: a key of the other filter
// kind holds nothing, as RedisBloom answers (a table-backed set and an
// expiring key answer both families).
//
// The answers are in the connection's scratch (c.flags): the caller is done
// with them before it answers another command.
func (c *conn) mayContain(name string, items [][]byte, other serve.Kind) []bool {
	held, kind := c.s.store.AppendMayContain(c.flags[:0], name, items)
	c.keepFlags(held)
	if kind == other {
		clear(held)
	}
	return held
}

// maxKeptFlags bounds the scratch for replies a connection keeps between
// commands (one huge BF.MEXISTS gets space of its own).
const maxKeptFlags = 4096

// keepFlags keeps flags' space as the connection's scratch for the next
// command's replies, so that answering BF.EXISTS or BF.ADD allocates
// nothing.
func (c *conn) keepFlags(flags []bool) {
	if cap(flags) <= maxKeptFlags {
		c.flags = flags[:0]
	} else {
		c.flags = nil
	}
}

// infoOf describes the key name if it is of one of kinds; a key of another
// kind is serve.ErrWrongType.
func (c *conn) infoOf(name string, kinds ...serve.Kind) (serve.Info, error) {
	info, err := c.s.store.Info(name)
	if err != nil {
		return info, err
	}
	for _, k := range kinds {
		if info.Kind == k {
			return info, nil
		}
	}
	return info, serve.ErrWrongType
}
