package pgwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/jackc/pgx/v5/pgproto3"
)

// A session relays one client connection to its own upstream connection.
//
// Two goroutines: run reads the client and writes the upstream (and answers
// locally); relay reads the upstream and writes the client. Every message
// forwarded upstream that the server answers pushes an expectation on a
// queue, in order; relay pops them as the answers arrive, which tells it
// which answer belongs to which statement (to learn result shapes) and
// tells run when nothing is outstanding: only then, with the session idle
// outside a transaction block, may a batch be answered locally, so that
// local answers never overtake the upstream's.
//
// Lock order: mu, then cmu.
type session struct {
	srv     *Server
	client  net.Conn
	cin     msgReader // reads the client (run only)
	startup *pgproto3.StartupMessage
	db      string
	user    string

	up   net.Conn
	uin  msgReader     // reads the upstream (relay only, after authenticate)
	uw   *bufio.Writer // writes the upstream (run only)
	cmu  sync.Mutex    // guards cw and cenc
	cw   *bufio.Writer // writes the client
	cenc []byte        // encodes messages for cw

	fakePID             uint32
	fakeSecret          []byte
	upPID               uint32
	upSecret            []byte
	closeOnce           sync.Once
	stmts               map[string]*stmtInfo // run only
	portals             map[string]int       // run only: portal name → configured statement (portalTmpl)
	batch               []clientMsg          // run only: extended-protocol messages up to Sync
	arena               []byte               // run only: the batch's messages as they came
	batchBytes          int
	answering           bool // the server's statements are matched (matchPrepared)
	passthrough         bool // run only: forward until Sync (after a Flush or an oversized batch)
	syncTmpl            int  // run only: a configured statement executed since the last Sync forwarded, or -1
	startupParamTainted bool

	mu       sync.Mutex
	queue    []expect
	qbuf     []expect // queue's memory from its start: reused once queue is empty
	txStatus byte
	copyIn   bool // an extended COPY FROM STDIN is under way: its Syncs get no answer
	tainted  bool // search_path or role changed: never answer locally
	params   map[string]string
	staged   map[int]*learned // result shapes described in this session, not yet seen to run
	idleWait chan struct{}

	dec struct { // relay only: the upstream's messages account decodes
		ready    pgproto3.ReadyForQuery
		complete pgproto3.CommandComplete
		row      pgproto3.RowDescription
	}

	wait *time.Timer // run only: decide's position wait, stopped between queries
	toks []token     // run only: the tokens of the last simple query
	ab   answerScratch
	slab msgSlab
	// last holds the last messages decoded (run only; decodeSame).
	last struct {
		parse    lastDecoded[pgproto3.Parse]
		describe lastDecoded[pgproto3.Describe]
		execute  lastDecoded[pgproto3.Execute]
	}
}

// msgSlab holds the decoded messages of the batch being held back, reused
// from one batch to the next (run only): clearBatch returns them all, so
// nothing may keep a decoded message past its batch (what it keeps of one,
// its strings and the slices pgproto3's Decode makes, is its own).
type msgSlab struct {
	parse    slab[pgproto3.Parse]
	bind     slab[pgproto3.Bind]
	describe slab[pgproto3.Describe]
	execute  slab[pgproto3.Execute]
	close    slab[pgproto3.Close]
}

func (s *msgSlab) reset() {
	s.parse.n, s.bind.n, s.describe.n, s.execute.n, s.close.n = 0, 0, 0, 0, 0
}

// slab hands out Ts, reusing those of the last batch; it keeps at most
// slabMax of them.
type slab[T any] struct {
	all []*T
	n   int
}

const slabMax = 64

func (s *slab[T]) get() *T {
	if s.n < len(s.all) {
		s.n++
		return s.all[s.n-1]
	}
	t := new(T)
	if len(s.all) < slabMax {
		s.all = append(s.all, t)
		s.n++
	}
	return t
}

// answerScratch is answerBatch's working memory, kept by the session (run
// only) so that answering a batch allocates nothing.
type answerScratch struct {
	lookups []lookup
	pending map[string]*stmtInfo
	shapes  map[int]*learned
	row     pgproto3.RowDescription // a learned row with a Bind's result formats
}

// lookup is a key a batch being answered looks up.
type lookup struct {
	tmpl int
	key  []byte // in the batch's arena
}

// stmtInfo is a prepared statement as the client sees it.
type stmtInfo struct {
	query    string
	oids     []uint32
	tmpl     int  // index in srv.table(), -1 when not a configured statement
	upstream bool // the upstream has it prepared with this text
	dropped  bool // kept after a DEALLOCATE or DISCARD: never matched again
}

type clientMsg struct {
	raw []byte                   // as it came, in the session's arena
	msg pgproto3.FrontendMessage // decoded from raw
}

// expect is an answer the upstream owes for a forwarded message.
type expect struct {
	kind    byte      // the client message's type: P B D E C S H Q F, or 'c' for the end of a COPY
	tmpl    int       // configured statement, -1 if none
	swallow bool      // a Parse we injected: its ParseComplete is not the client's
	stmt    bool      // Describe of a statement (ParameterDescription first)
	sent    time.Time // a Query or Sync of a configured statement: when it was forwarded
}

// noAnswer reports whether the upstream sends nothing for an expectation.
func (e expect) noAnswer() bool { return e.kind == 'H' || e.kind == 'c' }

// readBufferSize and writeBufferSize are each connection's buffers.
const (
	readBufferSize  = 32 << 10
	writeBufferSize = 32 << 10
)

// maxKeptDecoded bounds a message a session keeps decoded for its next
// (decodeSame).
const maxKeptDecoded = 8 << 10

// maxBatchBytes bounds the extended-protocol messages held back until their
// Sync; a larger batch is forwarded as it comes.
const maxBatchBytes = 1 << 20

func newSession(srv *Server, c net.Conn, br *bufio.Reader, startup *pgproto3.StartupMessage) *session {
	ss := &session{srv: srv, client: c, startup: startup, cw: bufio.NewWriterSize(c, writeBufferSize),
		cin:   msgReader{br: br, max: srv.cfg.MaxMessageSize},
		stmts: map[string]*stmtInfo{}, portals: map[string]int{}, params: map[string]string{}, staged: map[int]*learned{}, syncTmpl: -1}
	ss.user = startup.Parameters["user"]
	ss.db = startup.Parameters["database"]
	if ss.db == "" {
		ss.db = ss.user
	}
	for k, v := range startup.Parameters {
		switch k {
		case "user", "database", "application_name", "client_encoding", "datestyle", "DateStyle",
			"timezone", "TimeZone", "extra_float_digits", "fallback_application_name":
		case "options":
			if v != "" {
				ss.startupParamTainted = true
			}
		default:
			// search_path, role and any other setting given at startup
			// may change what a statement means.
			ss.startupParamTainted = true
		}
	}
	return ss
}

func (ss *session) close() {
	ss.closeOnce.Do(func() {
		ss.client.Close()
		if ss.up != nil {
			ss.up.Close()
		}
	})
}

func (ss *session) run() {
	defer ss.close()
	srv := ss.srv
	up, err := srv.dialUpstream(context.Background())
	if err != nil {
		srv.log.Warn("pgwire: upstream unreachable", "err", err)
		srv.health.failed(err)
		fatal(ss.client, "08006", "bloomgate: upstream PostgreSQL unreachable: "+err.Error())
		return
	}
	ss.up = up
	ss.uin = msgReader{br: bufio.NewReaderSize(up, readBufferSize)}
	ss.uw = bufio.NewWriterSize(up, 32<<10)
	up.SetDeadline(time.Now().Add(srv.cfg.StartupTimeout))
	if !ss.authenticate() {
		return
	}
	ss.client.SetDeadline(time.Time{})
	up.SetDeadline(time.Time{})
	ss.mu.Lock()
	ss.txStatus = 'I'
	ss.tainted = ss.startupParamTainted || ss.startup.Parameters["replication"] != ""
	ss.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ss.relay()
		ss.close()
	}()
	ss.serveClient()
	ss.close()
	<-done
}

// authenticate relays the startup message and the authentication exchange
// unchanged, replacing BackendKeyData with one of ours. It returns true at
// the first ReadyForQuery.
func (ss *session) authenticate() bool {
	b, err := ss.startup.Encode(nil)
	if err != nil {
		fatal(ss.client, "08P01", "invalid startup packet")
		return false
	}
	if _, err := ss.up.Write(b); err != nil {
		fatal(ss.client, "08006", "bloomgate: upstream PostgreSQL: "+err.Error())
		return false
	}
	for {
		raw, err := ss.uin.next()
		if err != nil {
			fatal(ss.client, "08006", "bloomgate: upstream PostgreSQL: "+err.Error())
			return false
		}
		switch raw[0] {
		case msgBackendKeyData:
			m, err := decodeAs(raw, &pgproto3.BackendKeyData{})
			if err != nil {
				fatal(ss.client, "08006", "bloomgate: upstream PostgreSQL: "+err.Error())
				return false
			}
			raw = mustEncode(ss.srv.issueKey(ss, m))
		case msgParameterStatus:
			if m, err := decodeAs(raw, &pgproto3.ParameterStatus{}); err == nil {
				ss.params[m.Name] = m.Value
			}
		}
		ss.cw.Write(raw)
		switch raw[0] {
		case msgErrorResponse:
			ss.cw.Flush()
			return false
		case msgReadyForQuery:
			return ss.cw.Flush() == nil
		case msgAuthentication:
			if len(raw) < 9 {
				return false
			}
			switch binary.BigEndian.Uint32(raw[5:]) {
			case pgproto3.AuthTypeCleartextPassword, pgproto3.AuthTypeMD5Password, pgproto3.AuthTypeSASL,
				pgproto3.AuthTypeSASLContinue, pgproto3.AuthTypeGSS, pgproto3.AuthTypeGSSCont:
				if err := ss.cw.Flush(); err != nil {
					return false
				}
				// The client's answer, whatever its kind, relayed as it is.
				resp, err := ss.cin.next()
				if err != nil || resp[0] != msgPassword {
					return false
				}
				if _, err := ss.up.Write(resp); err != nil {
					return false
				}
				continue
			}
		}
		if !ss.uin.whole() { // the rest of the upstream's burst first
			if err := ss.cw.Flush(); err != nil {
				return false
			}
		}
	}
}

// serveClient reads the client until it disconnects.
func (ss *session) serveClient() {
	for {
		if !ss.answering {
			ss.matchPrepared()
		}
		raw, err := ss.cin.next()
		if err != nil {
			var tooBig *pgproto3.ExceededMaxBodyLenErr
			if errors.As(err, &tooBig) {
				ss.sendFatal("54000", "bloomgate: message too large")
			} else if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				ss.sendFatal("08P01", "bloomgate: invalid frontend message: "+err.Error())
			}
			ss.forwardRaw(mustEncode(&pgproto3.Terminate{}), expect{kind: 'X'}, false)
			ss.uw.Flush()
			return
		}
		switch raw[0] {
		case msgTerminate:
			ss.flushBatch()
			ss.uw.Write(raw)
			ss.uw.Flush()
			return
		case msgQuery:
			ss.flushBatch()
			// A simple query drops the unnamed statement, upstream too.
			delete(ss.stmts, "")
			text, ok := queryText(raw)
			if !ok {
				ss.sendFatal("08P01", "bloomgate: invalid frontend message: Query: invalid message format")
				return
			}
			// Tokenized once: matched, answered, scanned. The text and
			// its tokens are used before the next read only.
			toks, terr := tokenizeInto(ss.toks, text)
			ss.toks = toks
			if terr == nil && ss.answerQuery(toks) {
				continue
			}
			ss.scanForwarded(text, toks, terr)
			ss.forwardRaw(raw, expect{kind: 'Q', tmpl: ss.matchTokens(toks, terr, true)}, true)
		case msgParse, msgBind, msgDescribe, msgExecute, msgClose:
			if ss.passthrough {
				cm, err := ss.decodeMsg(raw)
				if err != nil {
					ss.sendFatal("08P01", "bloomgate: invalid frontend message: "+err.Error())
					return
				}
				ss.forwardExtended(cm)
				ss.uw.Flush()
				ss.slab.reset() // nothing is held back while passing through
				continue
			}
			cm, err := ss.decodeMsg(ss.keep(raw))
			if err != nil {
				ss.sendFatal("08P01", "bloomgate: invalid frontend message: "+err.Error())
				return
			}
			ss.batch = append(ss.batch, cm)
			ss.batchBytes += len(raw)
			if ss.batchBytes > maxBatchBytes {
				ss.flushBatch()
				ss.passthrough = true
			}
		case msgSync:
			if ss.passthrough {
				ss.forwardExtended(clientMsg{raw: raw, msg: &pgproto3.Sync{}})
				ss.uw.Flush()
				ss.passthrough = false
				continue
			}
			ss.batch = append(ss.batch, clientMsg{raw: ss.keep(raw), msg: &pgproto3.Sync{}})
			if !ss.answerBatch() {
				ss.flushBatch()
			}
			ss.clearBatch()
		case msgFlush:
			// The client wants the answers so far before it sends Sync.
			ss.flushBatch()
			ss.forwardRaw(raw, expect{kind: 'H'}, true)
			ss.passthrough = true
		case msgCopyData:
			ss.flushBatch()
			ss.uw.Write(raw)
			if ss.uw.Buffered() > 16<<10 {
				ss.uw.Flush()
			}
		case msgCopyDone, msgCopyFail:
			ss.flushBatch()
			ss.mu.Lock()
			ss.copyIn = false
			ss.mu.Unlock()
			ss.forwardRaw(raw, expect{kind: 'c'}, true)
		case msgFunctionCal:
			ss.flushBatch()
			ss.forwardRaw(raw, expect{kind: 'F', tmpl: -1}, true)
		default:
			// Not acted on: relayed, the upstream judges it.
			ss.flushBatch()
			ss.uw.Write(raw)
			ss.uw.Flush()
		}
	}
}

// keep copies a client message into the session's arena, for a batch held
// back until its Sync.
func (ss *session) keep(raw []byte) []byte {
	start := len(ss.arena)
	ss.arena = append(ss.arena, raw...)
	return ss.arena[start:len(ss.arena):len(ss.arena)]
}

// clearBatch empties the batch and its arena, keeping a small arena's
// memory for the next.
func (ss *session) clearBatch() {
	ss.batch, ss.batchBytes = ss.batch[:0], 0
	ss.slab.reset()
	if cap(ss.arena) > 64<<10 {
		ss.arena = nil
	}
	ss.arena = ss.arena[:0]
}

// queryText returns a Query message's text, as pgproto3.Query decodes it
// (up to its NUL) but without a copy: the string shares raw's memory and is
// valid only while raw is (until the session's next read), which is as long
// as the session uses it.
func queryText(raw []byte) (string, bool) {
	body := raw[5:]
	i := bytes.IndexByte(body, 0)
	if i < 0 {
		return "", false
	}
	if i == 0 {
		return "", true
	}
	return unsafe.String(&body[0], i), true
}

// Replies of a local answer, encoded once.
var (
	selectZero    = mustEncode(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
	readyIdle     = mustEncode(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	parseComplete = mustEncode(&pgproto3.ParseComplete{})
	bindComplete  = mustEncode(&pgproto3.BindComplete{})
)

func mustEncode(m interface{ Encode([]byte) ([]byte, error) }) []byte {
	b, _ := m.Encode(nil)
	return b
}

// decodeMsg decodes an extended-protocol message into one of the
// session's message structs (see msgSlab); the decoded message shares raw's
// memory.
func (ss *session) decodeMsg(raw []byte) (clientMsg, error) {
	switch raw[0] {
	case msgParse:
		return decodeSame(&ss.last.parse, raw, ss.slab.parse.get())
	case msgBind:
		return decodeSame(nil, raw, ss.slab.bind.get())
	case msgDescribe:
		return decodeSame(&ss.last.describe, raw, ss.slab.describe.get())
	case msgExecute:
		return decodeSame(&ss.last.execute, raw, ss.slab.execute.get())
	default: // msgClose
		return decodeSame(nil, raw, ss.slab.close.get())
	}
}

// lastDecoded is the last message of a type decoded, as it came.
type lastDecoded[T any] struct {
	raw []byte
	msg T
}

// decodeSame decodes raw into m, or copies last's message when raw is the
// same as last's (a client re-preparing its unnamed statement and
// executing its unnamed portal for every query): each is decoded once. A
// decoded message's strings and slices are the decoder's own, never
// changed, so copies share them safely. last may be nil.
func decodeSame[T any, PT interface {
	*T
	pgproto3.FrontendMessage
	Decode([]byte) error
}](last *lastDecoded[T], raw []byte, m PT) (clientMsg, error) {
	if last != nil && last.raw != nil && bytes.Equal(raw, last.raw) {
		*m = last.msg
		return clientMsg{raw: raw, msg: m}, nil
	}
	if _, err := decodeAs(raw, m); err != nil {
		return clientMsg{}, err
	}
	if last != nil && len(raw) <= maxKeptDecoded {
		last.raw, last.msg = append(last.raw[:0], raw...), *m
	}
	return clientMsg{raw: raw, msg: m}, nil
}

// sendFatal sends the client a FATAL error.
func (ss *session) sendFatal(code, msg string) {
	ss.cmu.Lock()
	defer ss.cmu.Unlock()
	ss.sendLocked(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
	ss.cw.Flush()
}

// sendLocked writes messages to the client's buffer; cmu is held.
func (ss *session) sendLocked(msgs ...pgproto3.BackendMessage) {
	for _, m := range msgs {
		b, err := m.Encode(ss.cenc[:0])
		if err != nil {
			continue // only an oversized message fails to encode; ours are small
		}
		ss.cenc = b
		ss.cw.Write(b)
	}
}

// forwardRaw writes raw upstream, pushing e first when the upstream will
// answer it.
func (ss *session) forwardRaw(raw []byte, e expect, flush bool) {
	if (e.kind == 'Q' || e.kind == 'S') && e.tmpl >= 0 {
		e.sent = time.Now()
	}
	if e.kind != 'X' {
		ss.mu.Lock()
		if !(e.kind == 'S' && ss.copyIn) {
			if len(ss.queue) == 0 {
				// Popping moves queue's start forward: start again at
				// its memory's beginning rather than grow it.
				ss.queue = ss.qbuf[:0]
			}
			ss.queue = append(ss.queue, e)
			if cap(ss.queue) > cap(ss.qbuf) {
				ss.qbuf = ss.queue[:0] // grown: a new array, queue at its start
			}
		}
		ss.mu.Unlock()
	}
	ss.uw.Write(raw)
	if flush {
		ss.uw.Flush()
	}
}

// flushBatch forwards the held-back extended-protocol messages.
func (ss *session) flushBatch() {
	if len(ss.batch) == 0 {
		return
	}
	for _, cm := range ss.batch {
		ss.forwardExtended(cm)
	}
	ss.clearBatch()
	ss.uw.Flush()
}

// forwardExtended forwards one extended-protocol message, first preparing
// upstream a statement the client prepared in a batch answered locally.
func (ss *session) forwardExtended(cm clientMsg) {
	switch m := cm.msg.(type) {
	case *pgproto3.Parse:
		toks, terr := tokenize(m.Query)
		ss.scanForwarded(m.Query, toks, terr)
		tmpl := ss.matchTokens(toks, terr, false)
		ss.stmts[m.Name] = &stmtInfo{query: m.Query, oids: m.ParameterOIDs, tmpl: tmpl, upstream: true}
		ss.forwardRaw(cm.raw, expect{kind: 'P', tmpl: tmpl}, false)
		return
	case *pgproto3.Bind:
		st := ss.ensureUpstream(m.PreparedStatement)
		ss.forwardRaw(cm.raw, expect{kind: 'B', tmpl: st}, false)
		ss.portalTmpl(m.DestinationPortal, st)
		return
	case *pgproto3.Describe:
		if m.ObjectType == 'S' {
			st := ss.ensureUpstream(m.Name)
			ss.forwardRaw(cm.raw, expect{kind: 'D', tmpl: st, stmt: true}, false)
			return
		}
		ss.forwardRaw(cm.raw, expect{kind: 'D', tmpl: ss.portalTmpl(m.Name, -2)}, false)
		return
	case *pgproto3.Execute:
		tmpl := ss.portalTmpl(m.Portal, -2)
		if tmpl >= 0 {
			ss.syncTmpl = tmpl
		}
		ss.forwardRaw(cm.raw, expect{kind: 'E', tmpl: tmpl}, false)
		return
	case *pgproto3.Close:
		if m.ObjectType == 'S' {
			delete(ss.stmts, m.Name)
		}
		ss.forwardRaw(cm.raw, expect{kind: 'C', tmpl: -1}, false)
		return
	case *pgproto3.Sync:
		ss.forwardRaw(cm.raw, expect{kind: 'S', tmpl: ss.syncTmpl}, false)
		ss.syncTmpl = -1
		return
	}
	ss.forwardRaw(cm.raw, expect{kind: 'H'}, false) // unreachable: every batched message is above
}

// matchPrepared matches the statements the session prepared while the
// server had no statements to answer (Server.Answer came later), once it
// has them; a pooled client's prepared lookup is then answered like one
// prepared afterwards.
func (ss *session) matchPrepared() {
	if ss.srv.table() == nil {
		return
	}
	ss.answering = true
	for _, st := range ss.stmts {
		if st.query != "" && st.tmpl < 0 && !st.dropped {
			st.tmpl = ss.matchExtended(st.query, false)
		}
	}
}

// portalTmpl maps portal names to configured statements for learning
// (set -2 looks name up, any other value binds it); a portal is only as
// good as the last Bind seen for its name.
func (ss *session) portalTmpl(name string, set int) int {
	if set != -2 {
		ss.portals[name] = set // no allocation once the name is known
		return set
	}
	if t, ok := ss.portals[name]; ok {
		return t
	}
	return -1
}

// ensureUpstream prepares statement name upstream if only the client has
// it (prepared in a batch answered locally), and returns its template.
func (ss *session) ensureUpstream(name string) int {
	st := ss.stmts[name]
	if st == nil {
		return -1
	}
	if !st.upstream {
		p := &pgproto3.Parse{Name: name, Query: st.query, ParameterOIDs: st.oids}
		ss.forwardRaw(mustEncode(p), expect{kind: 'P', tmpl: st.tmpl, swallow: true}, false)
		st.upstream = true
	}
	return st.tmpl
}

// matchExtended returns the configured statement q is, or -1. With
// literal, q is a simple-protocol query whose key is a literal.
func (ss *session) matchExtended(q string, literal bool) int {
	if len(ss.srv.table()) == 0 {
		return -1
	}
	toks, err := tokenize(q)
	return ss.matchTokens(toks, err, literal)
}

// matchTokens is matchExtended on q's tokens (err: tokenize's error).
func (ss *session) matchTokens(toks []token, err error, literal bool) int {
	if err != nil || len(ss.srv.table()) == 0 {
		return -1
	}
	for i, st := range ss.srv.table() {
		if st.Database != ss.db {
			continue
		}
		if _, k := st.tmpl.match(toks, literal); k != matchNone {
			return i
		}
	}
	return -1
}

// scanForwarded drops learned result shapes when a forwarded statement may
// change a table or a privilege, stops answering locally in a session that
// changes its search_path or role or names a temporary table, and forgets
// the session's prepared statements when it may drop them with SQL.
func (ss *session) scanForwarded(q string, toks []token, err error) {
	ddl, setting, set, drop := false, false, false, false
	// A temporary table comes first on the session's search_path: it may
	// take the set's table's name in this session alone (CREATE TEMP TABLE,
	// SELECT … INTO TEMP, a table in pg_temp).
	temp, createInto, pgTemp := false, false, false
	check := func(w string) {
		ddl = ddl || ddlWords[w]
		drop = drop || stmtWords[w]
		setting = setting || sessionWords[w]
		set = set || w == "set" || w == "reset" || w == "set_config"
		temp = temp || w == "temp" || w == "temporary"
		createInto = createInto || w == "create" || w == "into"
		pgTemp = pgTemp || strings.HasPrefix(w, "pg_temp")
	}
	if err == nil {
		do := len(toks) > 0 && toks[0] == (token{kind: tokIdent, val: "do"})
		for _, t := range toks {
			switch t.kind {
			case tokIdent:
				check(t.val)
			case tokQIdent:
				// SET "search_path": setting names are not case-sensitive.
				d, st, s, _ := scanWords(t.val, false)
				ddl, setting, set = ddl || d, setting || st, set || s
				pgTemp = pgTemp || len(t.val) >= 7 && strings.EqualFold(t.val[:7], "pg_temp")
			case tokString:
				// A DO block's or a function call's text may set the
				// search_path (set_config): taint the session on the words
				// alone. DDL words in strings count only in a DO block, so
				// that data mentioning "drop" keeps the learned shapes.
				// DEALLOCATE or DISCARD in any string counts: a function
				// may run it (EXECUTE in PL/pgSQL).
				d, st, s, dr := scanWords(t.val, true)
				ddl, setting, set, drop = ddl || d && do, setting || st, set || s, drop || dr
			}
		}
	} else {
		for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r == '_')
		}) {
			check(w)
		}
	}
	if ddl {
		ss.srv.cache.clear()
	}
	if drop {
		ss.forgetPrepared()
	}
	if setting && set || temp && createInto || pgTemp { // SHOW search_path is harmless
		ss.mu.Lock()
		ss.tainted = true
		ss.mu.Unlock()
	}
}

// forgetPrepared forgets the session's prepared statements once it may have
// dropped them upstream (DEALLOCATE, DISCARD ALL): a name may then be
// prepared again, with SQL, as another statement, which the front end would
// not see. Bind and Describe of a forgotten name are relayed; a statement
// only the client has (prepared in a batch answered locally) is kept, to be
// prepared upstream when bound, but never answered again.
func (ss *session) forgetPrepared() {
	for name, st := range ss.stmts {
		if st.upstream {
			delete(ss.stmts, name)
		} else {
			st.tmpl, st.dropped = -1, true
		}
	}
}

// scanWords reports whether the words (letters and underscores, in any
// case) of s include a ddlWord, a sessionWord, set, reset or set_config,
// and a stmtWord.
// Words too long to be one are skipped. In a string literal "all" does not
// count: text saying "set all" is common, and RESET ALL only returns to the
// settings the session started with.
func scanWords(s string, literal bool) (ddl, setting, set, drop bool) {
	var buf [32]byte
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] == '_') {
			j++
		}
		if j == i {
			i++
			continue
		}
		if j-i <= len(buf) {
			w := buf[:j-i]
			for k := range w {
				c := s[i+k]
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				w[k] = c
			}
			ddl = ddl || ddlWords[string(w)]
			setting = setting || sessionWords[string(w)] && !(literal && string(w) == "all")
			set = set || string(w) == "set" || string(w) == "reset" || string(w) == "set_config"
			drop = drop || stmtWords[string(w)]
		}
		i = j
	}
	return ddl, setting, set, drop
}

// ddlWords may change a table's shape or a privilege: learned result shapes
// are dropped. sessionWords may change what a name or a literal means in
// the session: it is relayed only from then on. stmtWords may drop the
// session's prepared statements: the front end forgets them.
var (
	ddlWords = map[string]bool{"alter": true, "drop": true, "create": true, "grant": true, "revoke": true,
		"comment": true, "security": true, "policy": true, "import": true}
	sessionWords = map[string]bool{"search_path": true, "role": true, "authorization": true, "set_config": true, "all": true,
		"client_encoding": true, "standard_conforming_strings": true}
	stmtWords = map[string]bool{"deallocate": true, "discard": true}
)

// waitIdle waits until no forwarded message awaits an answer, and reports
// the session's state then (status 0 when it did not become idle).
func (ss *session) waitIdle() (status byte, tainted bool, encoding, stdStrings string) {
	ss.mu.Lock()
	if !ss.idleLocked() {
		deadline := time.NewTimer(ss.srv.cfg.PositionWait + time.Second)
		defer deadline.Stop()
		for !ss.idleLocked() {
			ch := make(chan struct{})
			ss.idleWait = ch
			ss.mu.Unlock()
			select {
			case <-ch:
			case <-deadline.C:
				// Answers owed for this long: stop answering this session
				// locally rather than make every query wait.
				ss.mu.Lock()
				ss.tainted = true
				ss.mu.Unlock()
				ss.srv.log.Warn("pgwire: a session's answers did not arrive in time; it is relayed only from now on")
				return 0, true, "", ""
			}
			ss.mu.Lock()
		}
	}
	ss.queue = ss.queue[:0]
	status, tainted = ss.txStatus, ss.tainted
	encoding, stdStrings = ss.params["client_encoding"], ss.params["standard_conforming_strings"]
	ss.mu.Unlock()
	return status, tainted, encoding, stdStrings
}

// waitTimer returns the session's stopped timer for decide, made once.
func (ss *session) waitTimer() *time.Timer {
	if ss.wait == nil {
		ss.wait = time.NewTimer(time.Hour)
		ss.wait.Stop()
	}
	return ss.wait
}

func (ss *session) idleLocked() bool {
	for _, e := range ss.queue {
		if !e.noAnswer() {
			return false
		}
	}
	return !ss.copyIn
}

// eligible checks the session's state for a local answer: "" or the reason
// to forward.
func (ss *session) eligible(literal matchKind) string {
	status, tainted, encoding, stdStrings := ss.waitIdle()
	switch {
	case status == 0:
		return ReasonBatch
	case status != 'I':
		return ReasonTransaction
	case tainted, encoding != "UTF8":
		return ReasonSession
	case literal == matchString && stdStrings != "on":
		return ReasonSession
	}
	return ""
}

// answerQuery answers a simple-protocol query locally when it is a
// configured statement with a literal key that is definitely absent.
func (ss *session) answerQuery(toks []token) bool {
	if len(ss.srv.table()) == 0 {
		return false
	}
	for i, st := range ss.srv.table() {
		if st.Database != ss.db {
			continue
		}
		key, kind := st.tmpl.match(toks, true)
		if kind == matchNone {
			continue
		}
		reason := ss.eligible(kind)
		var l *learned
		if reason == "" {
			l = ss.srv.cache.get(cacheKey{ss.db, ss.user, i})
			if l == nil {
				reason = ReasonNotLearned
			}
		}
		// The key as bytes without a copy: only read (hashed), and not
		// kept.
		kb := unsafe.Slice(unsafe.StringData(key), len(key))
		if reason == "" && !validKey(kb) {
			reason = ReasonKey
		}
		if reason == "" {
			reason = ss.srv.decide(context.Background(), st, kb, ss.waitTimer())
		}
		if reason != "" {
			st.fwd.WithLabelValues(reason).Inc()
			return false
		}
		st.local.Inc()
		ss.cmu.Lock()
		ss.sendLocked(l.row)
		ss.cw.Write(selectZero)
		ss.cw.Write(readyIdle)
		ss.cw.Flush()
		ss.cmu.Unlock()
		return true
	}
	return false
}

// validKey: a text parameter PostgreSQL accepts (UTF-8, no NUL).
func validKey(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c == 0 {
			return false
		}
	}
	return true
}

// localPortal is a portal bound in a batch being answered locally.
type localPortal struct {
	tmpl    int
	formats []int16
}

// answerBatch answers a batch ending in Sync locally when every message in
// it is part of a configured statement's execution for a key that is
// definitely absent; otherwise it returns false and the caller forwards it.
func (ss *session) answerBatch() bool {
	if len(ss.srv.table()) == 0 {
		return false
	}
	ab := &ss.ab
	if ab.pending == nil {
		ab.pending, ab.shapes = map[string]*stmtInfo{}, map[int]*learned{}
	}
	clear(ab.pending)
	clear(ab.shapes)
	lookups := ab.lookups[:0]
	defer func() { ab.lookups = lookups[:0] }()
	pending := ab.pending
	stmt := func(name string) *stmtInfo {
		if s, ok := pending[name]; ok {
			return s
		}
		return ss.stmts[name]
	}
	// Only the unnamed portal is bound in a batch answered locally.
	var portal localPortal
	bound := false
	portals := func(name string) *localPortal {
		if name != "" || !bound {
			return nil
		}
		return &portal
	}
	executes := 0
	// First pass: shape only, no waiting. A batch that touches no
	// configured statement is forwarded without counting.
	refusal := ""
	firstTmpl := -1
	for _, cm := range ss.batch {
		if refusal != "" {
			break
		}
		switch m := cm.msg.(type) {
		case *pgproto3.Parse:
			_, exists := ss.stmts[m.Name]
			if _, again := pending[m.Name]; m.Name != "" && (exists || again) {
				return false // the upstream's error: already exists
			}
			// The unnamed statement re-parsed as it was (as libpq's
			// PQexecParams does every time) is the one the upstream has:
			// its template is known.
			old := ss.stmts[m.Name]
			same := m.Name == "" && old != nil && old.upstream && old.query == m.Query && slicesEqual(old.oids, m.ParameterOIDs)
			var tmpl int
			if same {
				tmpl = old.tmpl
			} else {
				tmpl = ss.matchExtended(m.Query, false)
			}
			if tmpl < 0 || len(m.ParameterOIDs) > ss.srv.table()[tmpl].tmpl.Params() {
				return false
			}
			for _, oid := range m.ParameterOIDs {
				if !textOID(oid) {
					return false
				}
			}
			if same {
				pending[m.Name] = old
			} else {
				pending[m.Name] = &stmtInfo{query: m.Query, oids: m.ParameterOIDs, tmpl: tmpl}
			}
		case *pgproto3.Bind:
			st := stmt(m.PreparedStatement)
			if st == nil || st.tmpl < 0 {
				return false
			}
			if firstTmpl < 0 {
				firstTmpl = st.tmpl
			}
			if m.DestinationPortal != "" {
				refusal = ReasonBatch
				break
			}
			tp := ss.srv.table()[st.tmpl].tmpl
			if nf := len(m.ParameterFormatCodes); len(m.Parameters) != tp.Params() || nf > 1 && nf != tp.Params() ||
				!formatsOK(m.ParameterFormatCodes) || !formatsOK(m.ResultFormatCodes) {
				return false // the upstream's error, or nothing to do
			}
			key := m.Parameters[tp.Key()-1]
			if key == nil {
				refusal = ReasonKey
				break
			}
			for _, p := range m.Parameters {
				// Text in either format: a value PostgreSQL refuses
				// is its error, not "no row". NULL matches no row.
				if p != nil && !validKey(p) {
					refusal = ReasonKey
				}
			}
			if refusal != "" {
				break
			}
			lookups = append(lookups, lookup{st.tmpl, key})
			portal, bound = localPortal{tmpl: st.tmpl, formats: m.ResultFormatCodes}, true
		case *pgproto3.Describe:
			if m.ObjectType == 'S' {
				st := stmt(m.Name)
				if st == nil || st.tmpl < 0 {
					return false
				}
			} else if portals(m.Name) == nil {
				return false
			}
		case *pgproto3.Execute:
			if portals(m.Portal) == nil {
				return false
			}
			executes++
		case *pgproto3.Sync:
		default:
			return false
		}
	}
	if firstTmpl < 0 {
		return false
	}
	count := func(reason string) bool {
		for _, l := range lookups {
			ss.srv.table()[l.tmpl].fwd.WithLabelValues(reason).Inc()
		}
		if len(lookups) == 0 {
			ss.srv.table()[firstTmpl].fwd.WithLabelValues(reason).Inc()
		}
		return false
	}
	if refusal != "" {
		return count(refusal)
	}
	if executes == 0 {
		return false // a prepare or describe only: nothing to save
	}
	if reason := ss.eligible(matchParam); reason != "" {
		return count(reason)
	}
	// Every statement's shape must have been learned for this role.
	shapes := ab.shapes
	for _, cm := range ss.batch {
		var tmpl int
		switch m := cm.msg.(type) {
		case *pgproto3.Bind:
			tmpl = stmt(m.PreparedStatement).tmpl
		case *pgproto3.Describe:
			if m.ObjectType == 'S' {
				tmpl = stmt(m.Name).tmpl
			} else {
				tmpl = portals(m.Name).tmpl
			}
		default:
			continue
		}
		l := ss.srv.cache.get(cacheKey{ss.db, ss.user, tmpl})
		if l == nil {
			return count(ReasonNotLearned)
		}
		if d, ok := cm.msg.(*pgproto3.Describe); ok && d.ObjectType == 'S' && paramTypes(ss.srv.table()[tmpl], stmt(d.Name)) == nil {
			return count(ReasonNotLearned)
		}
		if b, ok := cm.msg.(*pgproto3.Bind); ok && len(b.ResultFormatCodes) > 1 && len(b.ResultFormatCodes) != len(l.row.Fields) {
			return false // the upstream's error
		}
		shapes[tmpl] = l
	}
	for _, l := range lookups {
		if reason := ss.srv.decide(context.Background(), ss.srv.table()[l.tmpl], l.key, ss.waitTimer()); reason != "" {
			return count(reason)
		}
	}
	// Answer: every key is definitely absent.
	ss.cmu.Lock()
	var cur localPortal
	for _, cm := range ss.batch {
		switch m := cm.msg.(type) {
		case *pgproto3.Parse:
			ss.cw.Write(parseComplete)
		case *pgproto3.Bind:
			st := stmt(m.PreparedStatement)
			cur = localPortal{tmpl: st.tmpl, formats: m.ResultFormatCodes}
			ss.cw.Write(bindComplete)
		case *pgproto3.Describe:
			if m.ObjectType == 'S' {
				st := stmt(m.Name)
				ss.sendLocked(&pgproto3.ParameterDescription{ParameterOIDs: paramTypes(ss.srv.table()[st.tmpl], st)})
				ss.sendLocked(shapes[st.tmpl].row)
			} else {
				ss.sendLocked(withFormats(&ab.row, shapes[cur.tmpl].row, cur.formats))
			}
		case *pgproto3.Execute:
			ss.srv.table()[cur.tmpl].local.Inc()
			ss.cw.Write(selectZero)
		case *pgproto3.Sync:
			ss.cw.Write(readyIdle)
		}
	}
	ss.cw.Flush() // a failed write ends the session at its next read
	ss.cmu.Unlock()
	for name, st := range pending {
		if old := ss.stmts[name]; old != nil && old.upstream && old.query == st.query && slicesEqual(old.oids, st.oids) {
			continue // the unnamed statement, re-parsed as it was: the upstream has it
		}
		ss.stmts[name] = st
	}
	return true
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// paramTypes returns the parameter types PostgreSQL would describe for a
// client's statement: the type the client declared for a parameter, else
// the one the database inferred (Statement.ParamOIDs); nil when one is
// unknown.
func paramTypes(rt *stmtRuntime, st *stmtInfo) []uint32 {
	oids := make([]uint32, rt.tmpl.Params())
	for i := range oids {
		if i < len(st.oids) && st.oids[i] != 0 {
			oids[i] = st.oids[i]
		} else if i < len(rt.ParamOIDs) {
			oids[i] = rt.ParamOIDs[i]
		}
		if oids[i] == 0 {
			return nil
		}
	}
	return oids
}

// textOID: the parameter types a text key may be declared with: unknown,
// text, varchar.
func textOID(oid uint32) bool { return oid == 0 || oid == 25 || oid == 1043 }

func formatsOK(f []int16) bool {
	for _, c := range f {
		if c != 0 && c != 1 {
			return false
		}
	}
	return true
}

// textRow returns a copy of row that owns its memory (the upstream reader's
// messages live until its next read), every column in text format, as a
// Describe of the statement reports it.
func textRow(row *pgproto3.RowDescription) *pgproto3.RowDescription {
	out := &pgproto3.RowDescription{Fields: make([]pgproto3.FieldDescription, len(row.Fields))}
	for i, f := range row.Fields {
		f.Name = append([]byte(nil), f.Name...)
		f.Format = 0
		out.Fields[i] = f
	}
	return out
}

// withFormats returns row with the result formats a Bind asked for,
// in dst's memory when they are not all text.
func withFormats(dst, row *pgproto3.RowDescription, formats []int16) *pgproto3.RowDescription {
	if len(formats) == 0 {
		return row
	}
	dst.Fields = append(dst.Fields[:0], row.Fields...)
	for i := range dst.Fields {
		if len(formats) == 1 {
			dst.Fields[i].Format = formats[0]
		} else {
			dst.Fields[i].Format = formats[i]
		}
	}
	return dst
}

// relay copies the upstream's messages to the client as they came,
// accounting for them against the queue.
func (ss *session) relay() {
	for {
		raw, err := ss.uin.next()
		if err == nil {
			var forward bool
			ss.mu.Lock()
			forward, err = ss.account(raw)
			if ss.idleWait != nil && ss.idleLocked() {
				close(ss.idleWait)
				ss.idleWait = nil
			}
			ss.mu.Unlock()
			if err == nil && !forward {
				if !ss.uin.whole() {
					// What was written before the swallowed message
					// must not wait for the upstream's next burst.
					ss.cmu.Lock()
					ferr := ss.cw.Flush()
					ss.cmu.Unlock()
					if ferr != nil {
						return
					}
				}
				continue
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				ss.sendFatal("08006", "bloomgate: upstream PostgreSQL connection lost: "+err.Error())
			}
			return
		}
		ss.cmu.Lock()
		ss.cw.Write(raw)
		var ferr error
		if !ss.uin.whole() {
			// Nothing more to send without waiting for the upstream.
			ferr = ss.cw.Flush()
		}
		ss.cmu.Unlock()
		if ferr != nil {
			return
		}
	}
}

// head returns the first expectation that is owed an answer, dropping the
// ones before it that are not.
func (ss *session) headLocked() *expect {
	for len(ss.queue) > 0 && ss.queue[0].noAnswer() && !(ss.queue[0].kind == 'c' && ss.copyIn) {
		ss.queue = ss.queue[1:]
	}
	if len(ss.queue) == 0 {
		return nil
	}
	return &ss.queue[0]
}

func (ss *session) popLocked() {
	if len(ss.queue) > 0 {
		ss.queue = ss.queue[1:]
	}
}

// account matches one upstream message with the queue and learns result
// shapes; it reports whether the client gets the message, and an error
// for a message it could not decode.
func (ss *session) account(raw []byte) (bool, error) {
	switch raw[0] {
	case msgDataRow, msgCopyData, msgCopyDone, msgNoticeResponse, msgNotification, msgCopyOutResponse, msgCopyBothResponse:
		return true, nil // the bulk of the traffic: not decoded
	case msgParameterStatus:
		m, err := decodeAs(raw, &pgproto3.ParameterStatus{})
		if err != nil {
			return false, err
		}
		ss.params[m.Name] = m.Value
		return true, nil
	}
	h := ss.headLocked()
	if h == nil {
		return true, nil // an answer to nothing we track (an error on termination)
	}
	switch raw[0] {
	case msgParseComplete:
		swallow := h.kind == 'P' && h.swallow
		if h.kind == 'P' {
			ss.popLocked()
		}
		return !swallow, nil
	case msgBindComplete, msgCloseComplete, msgNoData:
		if h.kind == 'B' || h.kind == 'C' || h.kind == 'D' {
			ss.popLocked()
		}
	case msgRowDescription:
		if (h.kind == 'D' || h.kind == 'Q') && h.tmpl >= 0 {
			if err := ss.learnRow(h.tmpl, raw); err != nil {
				return false, err
			}
		}
		if h.kind == 'D' {
			ss.popLocked()
		}
	case msgCommandComplete:
		if (h.kind == 'E' || h.kind == 'Q') && h.tmpl >= 0 {
			m, err := decodeAs(raw, &ss.dec.complete)
			if err != nil {
				return false, err
			}
			// A statement that ran for this role: its described shape
			// is what the upstream would describe now, unless DDL
			// passed since (the cache's generation).
			if l := ss.staged[h.tmpl]; l != nil && l.row != nil && bytes.HasPrefix(m.CommandTag, []byte("SELECT ")) {
				ss.srv.cache.put(cacheKey{ss.db, ss.user, h.tmpl}, l)
			}
		}
		if h.kind == 'E' {
			ss.popLocked()
		}
	case msgEmptyQuery, msgPortalSuspended:
		if h.kind == 'E' {
			ss.popLocked()
		}
	case msgCopyInResponse:
		if h.kind == 'E' {
			// The upstream ignores the Syncs sent during an extended
			// COPY FROM STDIN: they get no ReadyForQuery.
			ended := false
			kept := ss.queue[:1]
			for _, e := range ss.queue[1:] {
				ended = ended || e.kind == 'c'
				if !ended && (e.kind == 'S' || e.kind == 'H') {
					continue
				}
				kept = append(kept, e)
			}
			ss.queue = kept
			ss.copyIn = !ended
		}
	case msgErrorResponse:
		m, err := decodeAs(raw, &pgproto3.ErrorResponse{})
		if err != nil {
			return false, err
		}
		ss.copyIn = false
		if m.Code == "0A000" && strings.Contains(m.Message, "cached plan") {
			ss.srv.cache.clear()
		}
		switch h.kind {
		case 'P', 'B', 'D', 'E', 'C':
			// The upstream skips to the next Sync.
			for len(ss.queue) > 0 && ss.queue[0].kind != 'S' {
				ss.queue = ss.queue[1:]
			}
		}
	case msgReadyForQuery:
		m, err := decodeAs(raw, &ss.dec.ready)
		if err != nil {
			return false, err
		}
		ss.txStatus = m.TxStatus
		for len(ss.queue) > 0 {
			e := ss.queue[0]
			ss.queue = ss.queue[1:]
			if e.kind == 'S' || e.kind == 'Q' || e.kind == 'F' {
				if !e.sent.IsZero() {
					ss.srv.table()[e.tmpl].latency.Observe(time.Since(e.sent).Seconds())
				}
				break
			}
		}
		for len(ss.queue) > 0 && ss.queue[0].noAnswer() {
			ss.queue = ss.queue[1:]
		}
	}
	return true, nil
}

// learnRow stages the result shape of configured statement tmpl from a
// RowDescription the upstream sent for it. Each forwarded execution's
// shape is checked, so that a change made behind the front end's back is
// learned too; one the session (or, through the cache, another session)
// has learned already, byte for byte, is not decoded again.
func (ss *session) learnRow(tmpl int, raw []byte) error {
	l := ss.stagedFor(tmpl)
	if l.row != nil && bytes.Equal(l.raw, raw) {
		return nil
	}
	if c := ss.srv.cache.get(cacheKey{ss.db, ss.user, tmpl}); c != nil && c.gen == l.gen && bytes.Equal(c.raw, raw) {
		l.row, l.raw = c.row, c.raw
		return nil
	}
	m, err := decodeAs(raw, &ss.dec.row)
	if err != nil {
		return err
	}
	// Both new: what is staged may be shared through the cache, and is
	// never changed in place.
	l.row, l.raw = textRow(m), bytes.Clone(raw)
	return nil
}

func (ss *session) stagedFor(tmpl int) *learned {
	gen := ss.srv.cache.generation()
	l := ss.staged[tmpl]
	if l == nil || l.gen != gen {
		l = &learned{gen: gen}
		ss.staged[tmpl] = l
	}
	return l
}
