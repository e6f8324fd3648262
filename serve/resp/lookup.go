package resp

import "github.com/bloomgate/bloomgate/serve"

// mayContain answers BF.EXISTS and CF.EXISTS: a key of the other filter
// kind holds nothing, as RedisBloom answers (a table-backed set and an
// expiring key answer both families).
func (c *conn) mayContain(name string, items [][]byte, other serve.Kind) []bool {
	held, kind := c.s.store.MayContain(name, items)
	if kind == other {
		clear(held)
	}
	return held
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
