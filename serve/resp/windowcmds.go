package resp

import (
	"strconv"
	"time"

	"github.com/bloomgate/bloomgate/serve"
)

// Commands on expiring keys (serve.KindExpiring), a family of our own:
// RedisBloom has no per-item expiry.
//
//	BG.XRESERVE key error_rate capacity max_ttl_seconds [GENERATIONS g]
//	BG.XADD     key item (EX seconds | PX ms | EXAT unix_s | PXAT unix_ms)
//	BG.XMADD    key (EX seconds | PX ms | EXAT unix_s | PXAT unix_ms) item [item …]
//	BG.XEXISTS  key item
//	BG.XMEXISTS key item [item …]
//	BG.XINFO    key [CAPACITY|ERROR|MAXTTL|GENERATIONS|MAXGENERATIONS|ITEMS|SIZE|MAXSIZE|NEXTEXPIRY]
//
// DEL, EXISTS, TYPE and SCAN work on them as on any key.
var expiringCommands = []*command{
	{"bg.xreserve", -5, true, cmdXReserve},
	{"bg.xadd", 5, true, cmdXAdd},
	{"bg.xmadd", -5, true, cmdXMAdd},
	{"bg.xexists", 3, false, cmdXExists},
	{"bg.xmexists", -3, false, cmdXMExists},
	{"bg.xinfo", -2, false, cmdXInfo},
}

// cmdXReserve: BG.XRESERVE key error_rate capacity max_ttl_seconds
// [GENERATIONS g].
func cmdXReserve(c *conn, args [][]byte) {
	var p serve.ExpiringParams
	rate, ok := parseFloat(args[2])
	if !ok {
		c.w.errorMsg("ERR bad error rate")
		return
	}
	if !(rate > 0 && rate < 1) { // 0 would mean the default
		c.replyErr(serve.ErrBadErrorRate)
		return
	}
	capacity, ok := parseInt(args[3])
	if !ok {
		c.w.errorMsg("ERR bad capacity")
		return
	}
	ttl, ok := parseInt(args[4])
	if !ok || ttl < 1 {
		c.w.errorMsg("ERR bad max TTL: want whole seconds, at least 1")
		return
	}
	ttl = min(ttl, int64(maxTTLSeconds)) // beyond the store's bound: its check names the range
	// Out-of-range values go to the store's check, which names the range
	// (0 and below as 0: capacity has no default).
	p.ErrorRate, p.Capacity, p.MaxTTL = rate, uint64(max(capacity, 0)), time.Duration(ttl)*time.Second
	switch {
	case len(args) == 5:
	case len(args) == 7 && eqFold(args[5], "GENERATIONS"):
		g, ok := parseInt(args[6])
		if !ok {
			c.w.errorMsg("ERR bad generations")
			return
		}
		// 1 for anything below 2 (0 would mean the default): the store's
		// check refuses it, naming the range.
		p.Generations = int(max(min(g, 1<<16), 1))
	default:
		c.w.errorMsg("ERR syntax error")
		return
	}
	if err := c.s.store.Reserve(string(args[1]), p); err != nil {
		c.replyErr(err)
		return
	}
	c.w.simple("OK")
}

// maxTTLSeconds bounds the seconds a TTL argument may give (ten years, as
// serve's max TTL), so that converting it cannot overflow.
const maxTTLSeconds = 10 * 366 * 24 * 3600

// parseExpiry reads EX/PX/EXAT/PXAT and its value as an absolute time, or
// writes the error and returns false.
func (c *conn) parseExpiry(cmd string, opt, val []byte) (time.Time, bool) {
	v, ok := parseInt(val)
	if !ok {
		c.w.errorMsg("ERR value is not an integer or out of range")
		return time.Time{}, false
	}
	bad := func() (time.Time, bool) {
		c.w.errorMsg("ERR invalid expire time in '" + cmd + "' command")
		return time.Time{}, false
	}
	switch {
	case eqFold(opt, "EX"), eqFold(opt, "PX"):
		unit := time.Second
		if eqFold(opt, "PX") {
			unit = time.Millisecond
		}
		if v <= 0 {
			return bad()
		}
		if v > maxTTLSeconds*int64(time.Second/unit) {
			c.replyErr(serve.ErrExpiryBeyondTTL)
			return time.Time{}, false
		}
		return c.s.store.Now().Add(time.Duration(v) * unit), true
	case eqFold(opt, "EXAT"), eqFold(opt, "PXAT"):
		if v <= 0 {
			return bad()
		}
		// Beyond any max TTL from now: refused before the conversion,
		// which would overflow a huge value into the past.
		limit := c.s.store.Now().Unix() + maxTTLSeconds
		if eqFold(opt, "PXAT") {
			if v > limit*1000 {
				c.replyErr(serve.ErrExpiryBeyondTTL)
				return time.Time{}, false
			}
			return time.UnixMilli(v), true
		}
		if v > limit {
			c.replyErr(serve.ErrExpiryBeyondTTL)
			return time.Time{}, false
		}
		return time.Unix(v, 0), true
	}
	c.w.errorMsg("ERR syntax error")
	return time.Time{}, false
}

// cmdXAdd: BG.XADD key item EX|PX|EXAT|PXAT t.
func cmdXAdd(c *conn, args [][]byte) {
	exp, ok := c.parseExpiry("bg.xadd", args[3], args[4])
	if !ok {
		return
	}
	added, err := c.s.store.AddUntil(string(args[1]), args[2:3], exp)
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.bool(added[0])
}

// cmdXMAdd: BG.XMADD key EX|PX|EXAT|PXAT t item [item …].
func cmdXMAdd(c *conn, args [][]byte) {
	exp, ok := c.parseExpiry("bg.xmadd", args[2], args[3])
	if !ok {
		return
	}
	added, err := c.s.store.AddUntil(string(args[1]), args[4:], exp)
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.bools(added)
}

func cmdXExists(c *conn, args [][]byte) {
	if got, ok := c.xMayContain(string(args[1]), args[2:3]); ok {
		c.w.bool(got[0])
	}
}

func cmdXMExists(c *conn, args [][]byte) {
	if got, ok := c.xMayContain(string(args[1]), args[2:]); ok {
		c.w.bools(got)
	}
}

// xMayContain answers BG.X(M)EXISTS: a missing key is "not found" (as for
// BG.XADD: a revocation check against a key never reserved, misspelled or
// lost must fail, not pass every item), a key of another kind WRONGTYPE
// (replied here; ok is then false).
func (c *conn) xMayContain(name string, items [][]byte) (held []bool, ok bool) {
	held, kind := c.s.store.MayContain(name, items)
	switch kind {
	case serve.KindExpiring:
		return held, true
	case serve.KindNone:
		c.replyErr(serve.ErrNotFound)
	default:
		c.replyErr(serve.ErrWrongType)
	}
	return nil, false
}

// xinfoFields are BG.XINFO's fields: the option that selects one and its
// label in the full reply.
var xinfoFields = []struct{ option, label string }{
	{"CAPACITY", "Capacity"},
	{"ERROR", "Error rate"},
	{"MAXTTL", "Max TTL"},
	{"GENERATIONS", "Number of generations"},
	{"MAXGENERATIONS", "Max generations"},
	{"ITEMS", "Number of items"},
	{"SIZE", "Size"},
	{"MAXSIZE", "Max size"},
	{"NEXTEXPIRY", "Next expiry"},
}

// cmdXInfo: BG.XINFO key [field]. Max TTL is in seconds, Next expiry in Unix
// milliseconds (-1 when no generation is held), Error rate a bulk string.
func cmdXInfo(c *conn, args [][]byte) {
	if len(args) > 3 {
		c.arityError("bg.xinfo")
		return
	}
	field := -1
	if len(args) == 3 {
		for i, f := range xinfoFields {
			if eqFold(args[2], f.option) {
				field = i
			}
		}
		if field < 0 {
			c.w.errorMsg("Invalid information value")
			return
		}
	}
	all, err := c.infoOf(string(args[1]), serve.KindExpiring)
	if err != nil {
		c.replyErr(err)
		return
	}
	info := all.Expiring
	next := int64(-1)
	if !info.NextExpiry.IsZero() {
		next = info.NextExpiry.UnixMilli()
	}
	ints := []int64{
		int64(info.Params.Capacity), 0, int64(info.Params.MaxTTL / time.Second),
		int64(info.Generations), int64(info.Params.Generations), int64(info.Items),
		int64(info.Size), int64(info.MaxSize), next,
	}
	value := func(i int) {
		if i == 1 {
			c.w.bulkString(formatRate(info.Params.ErrorRate))
			return
		}
		c.w.int(ints[i])
	}
	if field >= 0 {
		if c.w.proto == 3 {
			c.w.mapHeader(1)
			c.w.simple(xinfoFields[field].label)
		} else {
			c.w.array(1)
		}
		value(field)
		return
	}
	c.w.mapHeader(len(xinfoFields))
	for i, f := range xinfoFields {
		c.w.simple(f.label)
		value(i)
	}
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }
