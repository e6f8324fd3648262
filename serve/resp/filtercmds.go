package resp

import (
	"errors"
	"strconv"

	"github.com/bloomgate/bloomgate/serve"
)

// ---- BF.* ----

func parseFloat(b []byte) (float64, bool) {
	v, err := strconv.ParseFloat(string(b), 64)
	return v, err == nil
}

// argIndex returns the index of keyword in args[from:] (case-insensitive),
// or -1: RedisBloom looks for BF.RESERVE/CF.RESERVE options anywhere.
func argIndex(args [][]byte, from int, keyword string) int {
	for i := from; i < len(args); i++ {
		if eqFold(args[i], keyword) {
			return i
		}
	}
	return -1
}

// cmdBFReserve: BF.RESERVE key error_rate capacity [EXPANSION n] [NONSCALING].
func cmdBFReserve(c *conn, args [][]byte) {
	if len(args) > 7 {
		c.arityError("bf.reserve")
		return
	}
	var p serve.BloomParams
	rate, ok := parseFloat(args[2])
	if !ok {
		c.w.errorMsg("ERR bad error rate")
		return
	}
	if !(rate > 0 && rate < 1) {
		c.replyErr(serve.ErrBadErrorRate) // before the capacity is parsed, as RedisBloom
		return
	}
	capacity, ok := parseInt(args[3])
	if !ok {
		c.w.errorMsg("ERR bad capacity")
		return
	}
	if capacity < 1 {
		c.replyErr(serve.ErrBadCapacity) // zero would mean the default below
		return
	}
	p.ErrorRate, p.Capacity = rate, uint64(capacity)
	p.NonScaling = argIndex(args, 4, "NONSCALING") >= 0
	if i := argIndex(args, 4, "EXPANSION"); i >= 0 {
		if i+1 == len(args) {
			c.w.errorMsg("ERR no expansion")
			return
		}
		e, ok := parseInt(args[i+1])
		if !ok {
			c.w.errorMsg("ERR bad expansion")
			return
		}
		if p.NonScaling && e > 0 {
			c.w.errorMsg("Nonscaling filters cannot expand")
			return
		}
		if e < 0 || e > 1<<31 {
			c.replyErr(serve.ErrBadExpansion)
			return
		}
		if e == 0 {
			p.NonScaling = true
		}
		p.Expansion = uint32(e)
	}
	if err := c.s.store.Reserve(string(args[1]), p); err != nil {
		c.replyErr(err)
		return
	}
	c.w.simple("OK")
}

// cmdBFAdd answers BF.ADD together with the BF.ADDs on the same key
// pipelined right after it (gather), in one Store.Add. When that call fails or
// stops, the items it did not answer are added one at a time, so each
// command gets the reply it would get alone.
func cmdBFAdd(c *conn, args [][]byte) {
	name := string(args[1])
	items := c.gather(args)
	if len(items) > 1 {
		added, stop, err := c.s.store.AppendAdd(c.flags[:0], name, items, serve.AddOptions{})
		c.keepFlags(added)
		if errors.Is(err, serve.ErrOutcomeUnknown) {
			c.replyErr(err) // applied, not durable: no reply, as one add alone
			return
		}
		if err == nil {
			for _, a := range added {
				c.w.bool(a)
			}
			if stop == nil {
				return
			}
			items = items[len(added):]
		}
	}
	for i := range items {
		if c.quit {
			return
		}
		c.addOne(name, items[i:i+1])
	}
}

// addOne answers one BF.ADD of item, a slice of one.
func (c *conn) addOne(name string, item [][]byte) {
	added, stop, err := c.s.store.AppendAdd(c.flags[:0], name, item, serve.AddOptions{})
	c.keepFlags(added)
	switch {
	case err != nil:
		c.replyErr(err)
	case stop != nil:
		c.replyErr(stop)
	default:
		c.w.bool(added[0])
	}
}

// writeAdded writes BF.MADD's array: one boolean per item, ending with the
// error that stopped it, if any.
func (c *conn) writeAdded(added []bool, stop error) {
	n := len(added)
	if stop != nil {
		n++
	}
	c.w.array(n)
	for _, a := range added {
		c.w.bool(a)
	}
	if stop != nil {
		c.replyErr(stop)
	}
}

func cmdBFMAdd(c *conn, args [][]byte) {
	added, stop, err := c.s.store.Add(string(args[1]), args[2:], serve.AddOptions{})
	if err != nil {
		c.replyErr(err)
		return
	}
	c.writeAdded(added, stop)
}

// cmdBFInsert: BF.INSERT key [CAPACITY c] [ERROR e] [EXPANSION x] [NOCREATE]
// [NONSCALING] ITEMS item….
func cmdBFInsert(c *conn, args [][]byte) {
	var p serve.BloomParams
	noCreate := false
	i := 2
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case eqFold(a, "ITEMS"):
			goto items
		case eqFold(a, "NOCREATE"):
			noCreate = true
		case eqFold(a, "NONSCALING"):
			p.NonScaling = true
		case eqFold(a, "CAPACITY") && i+1 < len(args):
			v, ok := parseInt(args[i+1])
			if !ok || v < 1 || v > 1<<31 {
				c.w.errorMsg("Bad capacity")
				return
			}
			p.Capacity = uint64(v)
			i++
		case eqFold(a, "ERROR") && i+1 < len(args):
			v, ok := parseFloat(args[i+1])
			if !ok || !(v > 0) {
				c.w.errorMsg("Bad error rate")
				return
			}
			p.ErrorRate = v
			i++
		case eqFold(a, "EXPANSION") && i+1 < len(args):
			v, ok := parseInt(args[i+1])
			if !ok || v < 0 || v > 1<<31 {
				c.w.errorMsg("Bad expansion")
				return
			}
			if v == 0 {
				p.NonScaling = true
			}
			p.Expansion = uint32(v)
			i++
		default:
			c.w.errorMsg("Unknown argument received")
			return
		}
	}
items:
	if i+1 >= len(args) {
		c.arityError("bf.insert")
		return
	}
	if p.NonScaling {
		p.Expansion = 0
	}
	added, stop, err := c.s.store.Add(string(args[1]), args[i+1:], serve.AddOptions{Create: p, NoCreate: noCreate})
	switch {
	case errors.Is(err, serve.ErrBadCapacity):
		c.w.errorMsg("Bad capacity") // BF.INSERT's texts for the same ranges
	case errors.Is(err, serve.ErrBadErrorRate):
		c.w.errorMsg("Bad error rate")
	case errors.Is(err, serve.ErrBadExpansion):
		c.w.errorMsg("Bad expansion")
	case err != nil:
		c.replyErr(err)
	default:
		c.writeAdded(added, stop)
	}
}

// cmdBFExists answers BF.EXISTS together with the BF.EXISTS on the same key
// pipelined right after it (gather), in one lookup batch.
func cmdBFExists(c *conn, args [][]byte) {
	for _, held := range c.mayContain(string(args[1]), c.gather(args), serve.KindCuckoo) {
		c.w.bool(held)
	}
}

func cmdBFMExists(c *conn, args [][]byte) {
	c.w.bools(c.mayContain(string(args[1]), args[2:], serve.KindCuckoo))
}

func cmdBFCard(c *conn, args [][]byte) {
	n, err := c.s.store.Cardinality(string(args[1]))
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.int(int64(n))
}

// cmdBFInfo: BF.INFO key [CAPACITY|SIZE|FILTERS|ITEMS|EXPANSION].
func cmdBFInfo(c *conn, args [][]byte) {
	if len(args) > 3 {
		c.arityError("bf.info")
		return
	}
	field := -1
	if len(args) == 3 {
		for i, f := range []string{"CAPACITY", "SIZE", "FILTERS", "ITEMS", "EXPANSION"} {
			if eqFold(args[2], f) {
				field = i
			}
		}
		if field < 0 {
			c.w.errorMsg("Invalid information value")
			return
		}
	}
	all, err := c.infoOf(string(args[1]), serve.KindBloom, serve.KindSet)
	if err != nil {
		c.replyErr(err)
		return
	}
	info := all.Bloom
	labels := []string{"Capacity", "Size", "Number of filters", "Number of items inserted", "Expansion rate"}
	values := []int64{int64(info.Capacity), int64(info.Size), int64(info.Filters), int64(info.Items), int64(info.Expansion)}
	writeField := func(i int) {
		c.w.simple(labels[i])
		if i == 4 && info.Expansion == 0 {
			c.w.null()
			return
		}
		c.w.int(values[i])
	}
	if field >= 0 {
		if c.w.proto == 3 {
			c.w.mapHeader(1)
			writeField(field)
			return
		}
		c.w.array(1)
		if field == 4 && info.Expansion == 0 {
			c.w.null()
		} else {
			c.w.int(values[field])
		}
		return
	}
	c.w.mapHeader(len(labels))
	for i := range labels {
		writeField(i)
	}
}

// cmdBFScanDump: BF.SCANDUMP key iterator.
func cmdBFScanDump(c *conn, args [][]byte) {
	iter, ok := parseInt(args[2])
	if !ok {
		c.w.errorMsg("Second argument must be numeric")
		return
	}
	next, data, err := scanDump(c.s.store, string(args[1]), serve.KindBloom, iter)
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.array(2)
	c.w.int(next)
	c.w.bulk(data) // the end is an empty bulk string, as RedisBloom
}

func cmdBFLoadChunk(c *conn, args [][]byte) {
	iter, ok := parseInt(args[2])
	if !ok {
		c.w.errorMsg("ERR Second argument must be numeric")
		return
	}
	if iter < 1 {
		c.w.errorMsg("ERR invalid offset - no link found")
		return
	}
	if err := loadChunk(c.s.store, string(args[1]), serve.KindBloom, iter, args[3]); err != nil {
		c.replyErr(err)
		return
	}
	c.w.simple("OK")
}

// ---- CF.* ----

// cmdCFReserve: CF.RESERVE key capacity [BUCKETSIZE b] [MAXITERATIONS m]
// [EXPANSION e].
func cmdCFReserve(c *conn, args [][]byte) {
	if len(args)%2 == 0 {
		c.arityError("cf.reserve")
		return
	}
	capacity, ok := parseInt(args[2])
	if !ok || capacity < 0 {
		c.w.errorMsg("Bad capacity")
		return
	}
	p := serve.CuckooParams{Capacity: uint64(capacity), BucketSize: 2, MaxIterations: 20, Expansion: 1}
	for _, o := range []struct {
		kw  string
		dst *int
	}{{"BUCKETSIZE", &p.BucketSize}, {"MAXITERATIONS", &p.MaxIterations}, {"EXPANSION", &p.Expansion}} {
		i := argIndex(args, 3, o.kw)
		if i < 0 {
			continue
		}
		if i+1 >= len(args) {
			c.w.errorMsg("Couldn't parse " + o.kw)
			return
		}
		v, ok := parseInt(args[i+1])
		if !ok || v < -1<<31 || v > 1<<31 {
			c.w.errorMsg("Couldn't parse " + o.kw)
			return
		}
		*o.dst = int(v)
	}
	if p.Expansion == 0 {
		p.NoExpansion = true
	}
	// Zero would mean "the default" to the store; RedisBloom refuses it.
	switch {
	case p.BucketSize < 1:
		c.replyErr(serve.ErrBadBucketSize)
		return
	case p.MaxIterations < 1:
		c.replyErr(serve.ErrBadMaxIterations)
		return
	case p.Capacity == 0:
		c.replyErr(serve.ErrBadCuckooCapacity)
		return
	}
	if err := c.s.store.Reserve(string(args[1]), p); err != nil {
		c.replyErr(err)
		return
	}
	c.w.simple("OK")
}

// insertReply is CF.INSERT(NX)'s integer for an insert result.
func insertReply(r serve.InsertResult) int64 {
	switch r {
	case serve.Inserted:
		return 1
	case serve.InsertNoRoom:
		return -1
	}
	return 0
}

func (c *conn) cfAddOne(args [][]byte, nx bool) {
	res, full, err := c.s.store.Insert(string(args[1]), args[2:3], serve.InsertOptions{IfAbsent: nx})
	switch {
	case err != nil:
		c.replyErr(err)
	case res[0] == serve.InsertNoRoom:
		c.replyErr(full)
	default:
		c.w.bool(res[0] == serve.Inserted)
	}
}

func cmdCFAdd(c *conn, args [][]byte)   { c.cfAddOne(args, false) }
func cmdCFAddNX(c *conn, args [][]byte) { c.cfAddOne(args, true) }

// cfInsert: CF.INSERT[NX] key [CAPACITY c] [NOCREATE] ITEMS item….
func (c *conn) cfInsert(args [][]byte, nx bool) {
	var p serve.CuckooParams
	noCreate := false
	name := "cf.insert"
	if nx {
		name = "cf.insertnx"
	}
	i := 2
	for ; i < len(args); i++ {
		switch a := args[i]; {
		case eqFold(a, "ITEMS"):
			goto items
		case eqFold(a, "NOCREATE"):
			noCreate = true
		case eqFold(a, "CAPACITY") && i+1 < len(args):
			v, ok := parseInt(args[i+1])
			if !ok || v < 0 {
				c.w.errorMsg("Bad capacity")
				return
			}
			if v == 0 || v > 1<<31 {
				c.w.errorMsg("Capacity must be in the range [cf-bucket-size * 2, 1073741824]")
				return
			}
			p.Capacity = uint64(v)
			i++
		default:
			c.w.errorMsg("Unknown argument received")
			return
		}
	}
items:
	if i+1 >= len(args) {
		c.arityError(name)
		return
	}
	res, _, err := c.s.store.Insert(string(args[1]), args[i+1:], serve.InsertOptions{Create: p, NoCreate: noCreate, IfAbsent: nx})
	if errors.Is(err, serve.ErrBadCuckooCapacity) {
		c.w.errorMsg("Capacity must be in the range [cf-bucket-size * 2, 1073741824]")
		return
	}
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.array(len(res))
	for _, r := range res {
		if nx || c.w.proto == 2 {
			c.w.int(insertReply(r))
		} else {
			c.w.bool(r == serve.Inserted)
		}
	}
}

func cmdCFInsert(c *conn, args [][]byte)   { c.cfInsert(args, false) }
func cmdCFInsertNX(c *conn, args [][]byte) { c.cfInsert(args, true) }

// cmdCFExists answers CF.EXISTS together with the CF.EXISTS on the same key
// pipelined right after it (gather).
func cmdCFExists(c *conn, args [][]byte) {
	for _, held := range c.mayContain(string(args[1]), c.gather(args), serve.KindBloom) {
		c.w.bool(held)
	}
}

func cmdCFMExists(c *conn, args [][]byte) {
	c.w.bools(c.mayContain(string(args[1]), args[2:], serve.KindBloom))
}

func cmdCFCount(c *conn, args [][]byte) {
	c.w.int(int64(c.s.store.Count(string(args[1]), args[2])))
}

func cmdCFDel(c *conn, args [][]byte) {
	ok, err := c.s.store.Remove(string(args[1]), args[2])
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.bool(ok)
}

func cmdCFInfo(c *conn, args [][]byte) {
	all, err := c.infoOf(string(args[1]), serve.KindCuckoo)
	if err != nil {
		c.replyErr(err)
		return
	}
	info := all.Cuckoo
	c.w.mapHeader(8)
	for _, f := range []struct {
		k string
		v int64
	}{
		{"Size", int64(info.Size)},
		{"Number of buckets", int64(info.Buckets)},
		{"Number of filters", int64(info.Filters)},
		{"Number of items inserted", int64(info.Inserted)},
		{"Number of items deleted", int64(info.Deleted)},
		{"Bucket size", int64(info.BucketSize)},
		{"Expansion rate", int64(info.Expansion)},
		{"Max iterations", int64(info.MaxIterations)},
	} {
		c.w.simple(f.k)
		c.w.int(f.v)
	}
}

func cmdCFScanDump(c *conn, args [][]byte) {
	iter, ok := parseInt(args[2])
	if !ok || iter < 0 {
		c.w.errorMsg("Invalid position")
		return
	}
	next, data, err := scanDump(c.s.store, string(args[1]), serve.KindCuckoo, iter)
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.array(2)
	c.w.int(next)
	if next == 0 {
		c.w.null() // CF.SCANDUMP ends with a null, as RedisBloom
		return
	}
	c.w.bulk(data)
}

func cmdCFLoadChunk(c *conn, args [][]byte) {
	iter, ok := parseInt(args[2])
	if !ok || iter < 1 {
		c.w.errorMsg("Invalid position")
		return
	}
	err := loadChunk(c.s.store, string(args[1]), serve.KindCuckoo, iter, args[3])
	var se *serve.Error
	switch {
	case err == nil:
		c.w.simple("OK")
	case errors.Is(err, serve.ErrOOM), errors.Is(err, serve.ErrWrongType), errors.Is(err, serve.ErrClosed):
		c.replyErr(err)
	case iter == 1 && errors.As(err, &se) && se == serve.ErrBadData:
		c.w.errorMsg("Invalid header")
	default:
		c.w.errorMsg("Couldn't load chunk!")
	}
}

// globMatch reports whether s matches the Redis glob pattern p (*, ?,
// [abc], [^a-z], \x). A pattern that needs more than a million steps does
// not match.
func globMatch(p, s []byte) bool {
	budget := 1_000_000
	return glob(p, s, &budget)
}

func glob(p, s []byte, budget *int) bool {
	for len(p) > 0 {
		if *budget--; *budget < 0 {
			return false
		}
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if glob(p[1:], s[i:], budget) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			p = p[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			q := p[1:]
			not := len(q) > 0 && q[0] == '^'
			if not {
				q = q[1:]
			}
			match := false
			for len(q) > 0 && q[0] != ']' {
				switch {
				case q[0] == '\\' && len(q) > 1:
					match = match || q[1] == s[0]
					q = q[2:]
				case len(q) > 2 && q[1] == '-' && q[2] != ']':
					lo, hi := q[0], q[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					match = match || (lo <= s[0] && s[0] <= hi)
					q = q[3:]
				default:
					match = match || q[0] == s[0]
					q = q[1:]
				}
			}
			if len(q) == 0 {
				return false // unterminated class
			}
			if match == not {
				return false
			}
			p = q[1:]
			s = s[1:]
		case '\\':
			if len(p) > 1 {
				p = p[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
			s = s[1:]
			p = p[1:]
		}
	}
	return len(s) == 0
}
