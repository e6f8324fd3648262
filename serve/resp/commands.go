package resp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/bloomgate/bloomgate/internal/version"
	"github.com/bloomgate/bloomgate/serve"
)

// command is one entry of the command table.
type command struct {
	name  string // lower case, as Redis names commands in errors
	arity int    // as Redis: n exact, -n at least n (the name counts)
	write bool
	fn    func(c *conn, args [][]byte)
}

var commandTable map[string]*command

func init() {
	list := []*command{
		{"ping", -1, false, cmdPing},
		{"echo", 2, false, cmdEcho},
		{"hello", -1, false, cmdHello},
		{"auth", -2, false, cmdAuth},
		{"select", 2, false, cmdSelect},
		{"client", -2, false, cmdClient},
		{"command", -1, false, cmdCommand},
		{"config", -2, false, cmdConfig},
		{"info", -1, false, cmdInfo},
		{"del", -2, true, cmdDel},
		{"unlink", -2, true, cmdDel},
		{"exists", -2, false, cmdExists},
		{"type", 2, false, cmdType},
		{"scan", -2, false, cmdScan},
		{"keys", 2, false, cmdKeys},
		{"dbsize", 1, false, cmdDBSize},
		{"quit", -1, false, cmdQuit},
		{"reset", 1, false, cmdReset},
		{"bf.reserve", -4, true, cmdBFReserve},
		{"bf.add", 3, true, cmdBFAdd},
		{"bf.madd", -3, true, cmdBFMAdd},
		{"bf.insert", -4, true, cmdBFInsert},
		{"bf.exists", 3, false, cmdBFExists},
		{"bf.mexists", -3, false, cmdBFMExists},
		{"bf.card", 2, false, cmdBFCard},
		{"bf.info", -2, false, cmdBFInfo},
		{"bf.scandump", 3, false, cmdBFScanDump},
		{"bf.loadchunk", 4, true, cmdBFLoadChunk},
		{"cf.reserve", -3, true, cmdCFReserve},
		{"cf.add", 3, true, cmdCFAdd},
		{"cf.addnx", 3, true, cmdCFAddNX},
		{"cf.insert", -4, true, cmdCFInsert},
		{"cf.insertnx", -4, true, cmdCFInsertNX},
		{"cf.exists", 3, false, cmdCFExists},
		{"cf.mexists", -3, false, cmdCFMExists},
		{"cf.count", 3, false, cmdCFCount},
		{"cf.del", 3, true, cmdCFDel},
		{"cf.info", 2, false, cmdCFInfo},
		{"cf.scandump", 3, false, cmdCFScanDump},
		{"cf.loadchunk", 4, true, cmdCFLoadChunk},
		{"bg.exists", 3, false, cmdBGExists},
		{"bg.existsat", 4, false, cmdBGExistsAt},
		{"bf.existsat", 4, false, cmdBFExistsAt},
	}
	list = append(list, expiringCommands...)
	commandTable = make(map[string]*command, len(list))
	for _, c := range list {
		commandTable[c.name] = c
	}
}

// preAuth lists the commands allowed before authentication.
var preAuth = map[string]bool{"auth": true, "hello": true, "quit": true}

func (c *conn) dispatch(args [][]byte) {
	var lower [32]byte
	name := lower[:0]
	if len(args[0]) <= len(lower) {
		for _, b := range args[0] {
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			name = append(name, b)
		}
	}
	cmd := commandTable[string(name)]
	if cmd == nil {
		c.unknownCommand(args)
		return
	}
	if !c.authed && !preAuth[cmd.name] {
		c.w.errorMsg("NOAUTH Authentication required.")
		return
	}
	if (cmd.arity > 0 && len(args) != cmd.arity) || (cmd.arity < 0 && len(args) < -cmd.arity) {
		c.arityError(cmd.name)
		return
	}
	c.cmd = cmd.name
	cmd.fn(c, args)
}

func (c *conn) unknownCommand(args [][]byte) {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", clip(args[0]))
	for _, a := range args[1:] {
		fmt.Fprintf(&b, "'%s' ", clip(a))
	}
	c.w.errorMsg(b.String())
}

func clip(b []byte) []byte {
	if len(b) > 128 {
		return b[:128]
	}
	return b
}

func (c *conn) arityError(name string) {
	c.w.errorMsg("ERR wrong number of arguments for '" + name + "' command")
}

// replyErr writes err's RESP text for the command being answered
// (errorText).
//
// A write whose outcome is unknown (serve.ErrOutcomeUnknown: applied, but
// the log could not be synced) gets no reply: the connection closes after
// the replies before it, as at a crash, because an error reply would say
// nothing changed.
func (c *conn) replyErr(err error) {
	if errors.Is(err, serve.ErrOutcomeUnknown) {
		c.s.cfg.Logger.Error("resp: closing the connection without a reply: a write's outcome is unknown", "remote", c.nc.RemoteAddr(), "err", err)
		c.quit = true
		c.w.bw.Flush()
		c.close()
		return
	}
	c.w.errorMsg(errorText(c.cmd, err))
}

func eqFold(b []byte, s string) bool { return strings.EqualFold(string(b), s) }

// ---- connection commands ----

func cmdPing(c *conn, args [][]byte) {
	switch len(args) {
	case 1:
		c.w.simple("PONG")
	case 2:
		c.w.bulk(args[1])
	default:
		c.arityError("ping")
	}
}

func cmdEcho(c *conn, args [][]byte) { c.w.bulk(args[1]) }

func cmdQuit(c *conn, _ [][]byte) {
	c.w.simple("OK")
	c.quit = true
}

func cmdReset(c *conn, _ [][]byte) {
	c.w.proto = 2
	c.name = ""
	if c.s.cfg.Password != "" && c.authed {
		c.authed = false
		c.demote()
	}
	c.setLimits()
	c.w.simple("RESET")
}

func cmdSelect(c *conn, args [][]byte) {
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		c.w.errorMsg("ERR value is not an integer or out of range")
	case n != 0:
		c.w.errorMsg("ERR DB index is out of range")
	default:
		c.w.simple("OK")
	}
}

// authenticate marks the connection authenticated, counting it against
// MaxConns; past it, it replies and closes the connection instead.
func (c *conn) authenticate() bool {
	if err := c.promote(); err != nil {
		c.w.errorMsg("ERR " + err.Error())
		c.quit = true
		return false
	}
	c.authed = true
	c.setLimits()
	return true
}

func cmdAuth(c *conn, args [][]byte) {
	if len(args) > 3 {
		c.w.errorMsg("ERR syntax error")
		return
	}
	if c.s.cfg.Password == "" {
		c.w.errorMsg("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	user, pass := "", string(args[1])
	if len(args) == 3 {
		user, pass = string(args[1]), string(args[2])
	}
	if !c.s.checkPassword(user, pass) {
		c.authFailed()
		c.w.errorMsg("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	if !c.authenticate() {
		return
	}
	c.w.simple("OK")
}

// cmdHello: HELLO [protover [AUTH user pass] [SETNAME name]].
func cmdHello(c *conn, args [][]byte) {
	proto := c.w.proto
	if len(args) > 1 {
		v, ok := parseInt(args[1])
		if !ok {
			c.w.errorMsg("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.w.errorMsg("NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	authed, name := c.authed, c.name
	for i := 2; i < len(args); i++ {
		switch {
		case eqFold(args[i], "AUTH") && i+2 < len(args):
			if c.s.cfg.Password == "" {
				c.w.errorMsg("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
				return
			}
			if !c.s.checkPassword(string(args[i+1]), string(args[i+2])) {
				c.authFailed()
				c.w.errorMsg("WRONGPASS invalid username-password pair or user is disabled.")
				return
			}
			authed = true
			i += 2
		case eqFold(args[i], "SETNAME") && i+1 < len(args):
			name = string(args[i+1])
			i++
		default:
			c.w.errorMsg("ERR Syntax error in HELLO option '" + string(clip(args[i])) + "'")
			return
		}
	}
	if authed && !c.authed && !c.authenticate() {
		return
	}
	if !authed {
		c.w.errorMsg("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	c.authed, c.name, c.w.proto = authed, name, proto
	c.setLimits()
	c.w.mapHeader(7)
	c.w.bulkString("server")
	c.w.bulkString("redis")
	c.w.bulkString("version")
	c.w.bulkString(redisVersion)
	c.w.bulkString("proto")
	c.w.int(int64(proto))
	c.w.bulkString("id")
	c.w.int(c.id)
	c.w.bulkString("mode")
	c.w.bulkString("standalone")
	c.w.bulkString("role")
	c.w.bulkString("master")
	c.w.bulkString("modules")
	c.w.array(1)
	c.w.mapHeader(4)
	c.w.bulkString("name")
	c.w.bulkString("bf")
	c.w.bulkString("ver")
	c.w.int(bloomModuleVersion)
	c.w.bulkString("path")
	c.w.bulkString("bloomgate")
	c.w.bulkString("args")
	c.w.array(0)
}

// The versions we announce: the Redis version whose replies we follow, and
// RedisBloom's module version numbering. Tools read INFO's redis_version to
// decide what the server supports (Sidekiq refuses a version it considers
// too old, for instance), so it names the Redis behaviour whose replies are
// followed, not this server: bloomgate_version says which build runs.
const (
	redisVersion       = "7.4.0"
	bloomModuleVersion = 20800
)

func cmdClient(c *conn, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "setname" && len(args) == 3:
		if bytes.ContainsAny(args[2], " \n\r") {
			c.w.errorMsg("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.name = string(args[2])
		c.w.simple("OK")
	case sub == "getname" && len(args) == 2:
		if c.name == "" {
			c.w.null()
			return
		}
		c.w.bulkString(c.name)
	case sub == "setinfo" && len(args) == 4:
		c.w.simple("OK")
	case sub == "id" && len(args) == 2:
		c.w.int(c.id)
	case sub == "info" && len(args) == 2:
		c.w.bulkString(fmt.Sprintf("id=%d addr=%s name=%s db=0 resp=%d\n", c.id, c.nc.RemoteAddr(), c.name, c.w.proto))
	case sub == "setname" || sub == "getname" || sub == "setinfo" || sub == "id" || sub == "info":
		c.arityError("client|" + sub)
	default:
		c.w.errorMsg("ERR unknown subcommand '" + string(clip(args[1])) + "'. Try CLIENT HELP.")
	}
}

// cmdCommand: COMMAND, COMMAND COUNT, COMMAND DOCS, COMMAND INFO name….
func cmdCommand(c *conn, args [][]byte) {
	if len(args) == 1 {
		names := make([]string, 0, len(commandTable))
		for n := range commandTable {
			names = append(names, n)
		}
		slices.Sort(names)
		c.w.array(len(names))
		for _, n := range names {
			c.commandInfo(commandTable[n])
		}
		return
	}
	switch strings.ToLower(string(args[1])) {
	case "count":
		c.w.int(int64(len(commandTable)))
	case "docs":
		c.w.mapHeader(0)
	case "info":
		c.w.array(len(args) - 2)
		for _, a := range args[2:] {
			if cmd := commandTable[strings.ToLower(string(a))]; cmd != nil {
				c.commandInfo(cmd)
			} else {
				c.w.null()
			}
		}
	default:
		c.w.errorMsg("ERR unknown subcommand '" + string(clip(args[1])) + "'. Try COMMAND HELP.")
	}
}

// commandInfo writes a COMMAND entry: name, arity, flags, first key, last
// key, step, ACL categories, tips, key specs, subcommands.
func (c *conn) commandInfo(cmd *command) {
	first, last := 0, 0
	switch {
	case strings.HasPrefix(cmd.name, "bf.") || strings.HasPrefix(cmd.name, "cf.") || strings.HasPrefix(cmd.name, "bg.") || cmd.name == "type":
		first, last = 1, 1
	case cmd.name == "del" || cmd.name == "unlink" || cmd.name == "exists":
		first, last = 1, -1
	}
	c.w.array(10)
	c.w.bulkString(cmd.name)
	c.w.int(int64(cmd.arity))
	if cmd.write {
		c.w.setHeader(2)
		c.w.simple("write")
		c.w.simple("denyoom")
	} else {
		c.w.setHeader(2)
		c.w.simple("readonly")
		c.w.simple("fast")
	}
	c.w.int(int64(first))
	c.w.int(int64(last))
	c.w.int(int64(min(first, 1)))
	c.w.setHeader(0)
	c.w.setHeader(0)
	c.w.setHeader(0)
	c.w.setHeader(0)
}

// cmdConfig answers CONFIG GET for the few parameters tools ask for (save,
// appendonly, appendfsync, maxmemory, maxclients; glob patterns allowed) and
// refuses CONFIG SET.
func cmdConfig(c *conn, args [][]byte) {
	switch strings.ToLower(string(args[1])) {
	case "get":
		appendonly := "no"
		if c.s.store.Durable() {
			appendonly = "yes"
		}
		params := [][2]string{
			{"save", ""},
			{"appendonly", appendonly},
			{"appendfsync", string(c.s.store.FsyncPolicy())},
			{"maxmemory", strconv.FormatInt(c.s.store.MaxMemory(), 10)},
			{"maxclients", strconv.Itoa(c.s.cfg.MaxConns)},
		}
		var out [][2]string
		for _, p := range params {
			for _, pat := range args[2:] {
				if globMatch(bytes.ToLower(pat), []byte(p[0])) {
					out = append(out, p)
					break
				}
			}
		}
		c.w.mapHeader(len(out))
		for _, p := range out {
			c.w.bulkString(p[0])
			c.w.bulkString(p[1])
		}
	case "resetstat":
		c.w.simple("OK")
	default:
		c.w.errorMsg("ERR unknown subcommand or wrong number of arguments for '" + string(clip(args[1])) + "'")
	}
}

func cmdInfo(c *conn, _ [][]byte) {
	st := c.s.Stats()
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nbloomgate:1\r\nbloomgate_version:%s\r\nos:%s %s\r\nprocess_id:%d\r\nexecutable:%s\r\nhostname:%s\r\n\r\n",
		redisVersion, version.String(), runtime.GOOS, runtime.GOARCH, os.Getpid(), os.Args[0], host)
	fmt.Fprintf(&b, "# Clients\r\nconnected_clients:%d\r\nmaxclients:%d\r\n\r\n", st.Connections, c.s.cfg.MaxConns)
	fmt.Fprintf(&b, "# Memory\r\nused_memory:%d\r\nmaxmemory:%d\r\n\r\n", c.s.store.UsedMemory(), c.s.store.MaxMemory())
	fmt.Fprintf(&b, "# Stats\r\ntotal_connections_received:%d\r\nrejected_connections:%d\r\ntotal_commands_processed:%d\r\n\r\n",
		st.ConnectionsTotal, st.ConnectionsRejected, st.Commands)
	fmt.Fprintf(&b, "# Modules\r\nmodule:name=bf,ver=%d,api=1,filters=0,usedby=[],using=[],options=[]\r\n\r\n", bloomModuleVersion)
	c.infoBloomgate(&b)
	if n := c.s.store.Len(); n > 0 {
		fmt.Fprintf(&b, "# Keyspace\r\ndb0:keys=%d,expires=0,avg_ttl=0\r\n", n)
	} else {
		b.WriteString("# Keyspace\r\n")
	}
	c.w.bulkString(b.String())
}

// ---- keyspace commands ----

func names(args [][]byte) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}

func cmdDel(c *conn, args [][]byte) {
	n, err := c.s.store.Delete(names(args[1:]))
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.int(int64(n))
}

func cmdExists(c *conn, args [][]byte) { c.w.int(int64(c.s.store.Existing(names(args[1:])))) }

func cmdType(c *conn, args [][]byte) { c.w.simple(typeName(c.s.store.Type(string(args[1])))) }

func cmdDBSize(c *conn, _ [][]byte) { c.w.int(int64(c.s.store.Len())) }

func cmdKeys(c *conn, args [][]byte) {
	var out []string
	for _, k := range c.s.store.Keys() {
		if globMatch(args[1], []byte(k)) {
			out = append(out, k)
		}
	}
	c.w.array(len(out))
	for _, k := range out {
		c.w.bulkString(k)
	}
}

// cmdScan: SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]. The cursor is
// a position in the sorted list of keys: keys created or deleted during a
// scan may be missed or returned twice, as Redis allows.
func cmdScan(c *conn, args [][]byte) {
	cursor, ok := parseInt(args[1])
	if !ok || cursor < 0 {
		c.w.errorMsg("ERR invalid cursor")
		return
	}
	var match []byte
	count, typ := int64(10), ""
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			c.w.errorMsg("ERR syntax error")
			return
		}
		switch {
		case eqFold(args[i], "MATCH"):
			match = args[i+1]
		case eqFold(args[i], "COUNT"):
			n, ok := parseInt(args[i+1])
			if !ok {
				c.w.errorMsg("ERR value is not an integer or out of range")
				return
			}
			if n < 1 {
				c.w.errorMsg("ERR syntax error")
				return
			}
			count = n
		case eqFold(args[i], "TYPE"):
			typ = string(args[i+1])
		default:
			c.w.errorMsg("ERR syntax error")
			return
		}
	}
	keys := c.s.store.Keys()
	start := min(cursor, int64(len(keys)))
	end := min(start+count, int64(len(keys)))
	var out []string
	for _, k := range keys[start:end] {
		if match != nil && !globMatch(match, []byte(k)) {
			continue
		}
		if typ != "" && !strings.EqualFold(typeName(c.s.store.Type(k)), typ) {
			continue
		}
		out = append(out, k)
	}
	next := end
	if end == int64(len(keys)) {
		next = 0
	}
	c.w.array(2)
	c.w.bulkString(strconv.FormatInt(next, 10))
	c.w.array(len(out))
	for _, k := range out {
		c.w.bulkString(k)
	}
}

// ---- BG.EXISTS ----

// cmdBGExists: BG.EXISTS set key — exact membership: the filter, then the
// set's confirm query on "maybe".
func cmdBGExists(c *conn, args [][]byte) {
	ok, err := c.s.store.Has(context.Background(), string(args[1]), string(args[2]))
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.bool(ok)
}
