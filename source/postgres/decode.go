package postgres

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrProtocol reports a replication message the feed cannot make sense of:
// malformed, out of order (a change outside a transaction), for a relation
// it was not told about, or a kind it never asked for (streamed in-progress
// transactions). The stream stops: guessing could lose a key.
var ErrProtocol = errors.New("postgres: unexpected logical replication message")

// ErrKeyColumn reports that the table's relation, as the server describes it
// in the stream, has no column with the configured key name (it was dropped
// or renamed). The consumer must rebuild once the configuration is fixed. It
// wraps changefeed.ErrSetup.
var ErrKeyColumn = fmt.Errorf("%w: key column missing from the replicated table", changefeed.ErrSetup)

// relation is what the decoder knows about one relation of the stream.
type relation struct {
	ours     bool
	keyIdx   int  // index of the key column in a tuple, when ours
	valIdx   int  // index of the value column, -1 without one
	identity bool // the key column is part of the replica identity (always under FULL)
}

// decoder turns pgoutput messages (protocol 1) into Txns for one table and
// key column. It is not safe for concurrent use; one decoder serves one
// replication connection, since relation messages are per connection.
//
// Begin, Commit, Insert, Update and Delete, the messages of every row, are
// read in place rather than through pglogrepl, which allocates each message,
// each tuple, each column and a copy of each value. What a Txn keeps (its
// keys, values and Changes) is cut from chunks shared by successive
// transactions: handed over with their capacity cut to their length and
// never written again, so the consumer owns them as before.
type decoder struct {
	relID  uint32 // OID of the configured table
	column string
	value  string // FeedConfig.ValueColumn; "" for none
	rels   map[uint32]relation
	inTxn  bool
	done   changefeed.Txn // the last finished transaction, returned by message

	bytes []byte              // chunk the kept keys and values are cut from
	chg   []changefeed.Change // chunk the Changes are cut from
	first int                 // index in chg of the open transaction's first Change
}

// Chunk sizes. A chunk, once full, is followed by one twice its size up to
// the maximum; a value longer than bytesChunk/8 gets an allocation of its
// own (it would mostly waste the rest of a small chunk). A Changes chunk
// grown past maxChanges by a large transaction is let go after it, rather
// than hold its size for the small ones that follow.
const (
	bytesChunk   = 4 << 10
	maxBytes     = 64 << 10
	changesChunk = 64
	maxChanges   = 4 << 10
)

func newDecoder(relID uint32, column, value string) *decoder {
	return &decoder{relID: relID, column: column, value: value, rels: make(map[uint32]relation)}
}

// parse wraps pglogrepl.Parse, which indexes its input without bounds checks:
// a malformed message becomes ErrProtocol, never a panic.
func parse(data []byte) (m pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty message", ErrProtocol)
	}
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("%w: malformed %q message", ErrProtocol, data[0])
		}
	}()
	if !sizesValid(data) {
		return nil, fmt.Errorf("%w: malformed %q message", ErrProtocol, data[0])
	}
	m, err = pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %q message: %v", ErrProtocol, data[0], err)
	}
	return m, nil
}

// sizesValid checks the lengths pglogrepl would allocate from before it
// does: a tuple's column lengths and a Truncate's relation count must fit in
// the message.
func sizesValid(data []byte) bool {
	b := data[1:]
	switch data[0] {
	case 'T':
		return len(b) >= 5 && uint64(binary.BigEndian.Uint32(b))*4 <= uint64(len(b)-5)
	case 'I', 'U', 'D':
	default:
		return true
	}
	if len(b) < 4 {
		return false
	}
	b = b[4:]
	for len(b) > 0 {
		switch b[0] {
		case 'K', 'O', 'N':
		default:
			return false
		}
		var ok bool
		if b, ok = skipTuple(b[1:]); !ok {
			return false
		}
	}
	return true
}

// skipTuple returns what follows one TupleData in b.
func skipTuple(b []byte) ([]byte, bool) {
	if len(b) < 2 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for range n {
		if len(b) < 1 {
			return nil, false
		}
		kind := b[0]
		b = b[1:]
		if kind == 't' || kind == 'b' {
			if len(b) < 4 || uint64(binary.BigEndian.Uint32(b)) > uint64(len(b)-4) {
				return nil, false
			}
			b = b[4+int(binary.BigEndian.Uint32(b)):]
		}
	}
	return b, true
}

// message decodes one pgoutput message. It returns the finished transaction
// on a Commit, nil otherwise; the Txn it points to is valid until the next
// call (its Changes, keys and values stay valid).
func (d *decoder) message(data []byte) (*changefeed.Txn, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty message", ErrProtocol)
	}
	switch data[0] {
	case 'B':
		if len(data) < 1+20 {
			return nil, malformed(data)
		}
		if d.inTxn {
			return nil, fmt.Errorf("%w: Begin inside a transaction", ErrProtocol)
		}
		d.inTxn = true
		d.chg = d.chg[:d.first]
		return nil, nil
	case 'C':
		// Flags, commit LSN, end LSN, commit time.
		if len(data) < 1+25 {
			return nil, malformed(data)
		}
		if !d.inTxn {
			return nil, fmt.Errorf("%w: Commit outside a transaction", ErrProtocol)
		}
		commit := pglogrepl.LSN(binary.BigEndian.Uint64(data[2:]))
		end := pglogrepl.LSN(binary.BigEndian.Uint64(data[10:]))
		if end <= commit {
			return nil, fmt.Errorf("%w: Commit ends at %s, before its start %s", ErrProtocol, end, commit)
		}
		d.inTxn = false
		micros := int64(binary.BigEndian.Uint64(data[18:]))
		d.done = changefeed.Txn{
			Commit: changefeed.Position(commit), End: changefeed.Position(end),
			Time:    time.Unix(0, (pgEpochMicros+micros)*1000), // as pglogrepl converts it
			Changes: d.cut(),
		}
		return &d.done, nil
	case 'I', 'U', 'D':
		return nil, d.row(data)
	}
	m, err := parse(data)
	if err != nil {
		return nil, err
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		return nil, d.relation(m)
	case *pglogrepl.TruncateMessage:
		if !d.inTxn {
			return nil, fmt.Errorf("%w: Truncate outside a transaction", ErrProtocol)
		}
		for _, id := range m.RelationIDs {
			if id == d.relID {
				d.add(changefeed.Truncate, nil)
				break
			}
		}
		return nil, nil
	case *pglogrepl.OriginMessage, *pglogrepl.TypeMessage, *pglogrepl.LogicalDecodingMessage:
		return nil, nil
	}
	return nil, fmt.Errorf("%w: type %q", ErrProtocol, data[0])
}

func malformed(data []byte) error {
	return fmt.Errorf("%w: malformed %q message", ErrProtocol, data[0])
}

// row decodes an Insert, Update or Delete. It rejects what pglogrepl.Parse
// rejected (short messages, tuple kinds out of place, tuples that do not fit
// the message: sizesValid), and an Update whose old tuple is not followed by
// a new one.
func (d *decoder) row(data []byte) error {
	minLen := 5 // Delete
	switch data[0] {
	case 'I':
		minLen = 8
	case 'U':
		minLen = 6
	}
	b := data[1:]
	if len(b) < minLen || !sizesValid(data) {
		return malformed(data)
	}
	relID, kind, tup := binary.BigEndian.Uint32(b), b[4], b[5:]
	var ok bool
	switch data[0] {
	case 'I':
		ok = kind == 'N'
	case 'U':
		ok = kind == 'N' || kind == 'K' || kind == 'O'
	case 'D':
		ok = kind == 'K' || kind == 'O'
	}
	if !ok {
		return fmt.Errorf("%w: %q message: tuple type %q", ErrProtocol, data[0], kind)
	}
	var newTup []byte
	if data[0] == 'U' {
		if kind == 'N' {
			kind, newTup, tup = 0, tup, nil
		} else if rest, _ := skipTuple(tup); len(rest) > 0 && rest[0] == 'N' {
			newTup = rest[1:]
		} else {
			return malformed(data)
		}
	}
	rel, err := d.change(relID)
	if err != nil || !rel.ours {
		return err
	}
	switch data[0] {
	case 'I':
		return d.insert(rel, tup)
	case 'U':
		return d.update(rel, kind, tup, newTup)
	}
	return d.remove(rel, kind, tup)
}

func (d *decoder) relation(m *pglogrepl.RelationMessage) error {
	if m.RelationID != d.relID {
		d.rels[m.RelationID] = relation{}
		return nil
	}
	rel := relation{keyIdx: -1, valIdx: -1}
	for i, c := range m.Columns {
		switch {
		case c == nil:
		case c.Name == d.column && rel.keyIdx < 0:
			rel.keyIdx, rel.identity = i, c.Flags&1 != 0
		case d.value != "" && c.Name == d.value && rel.valIdx < 0:
			rel.valIdx = i
		}
	}
	switch {
	case rel.keyIdx < 0:
		return fmt.Errorf("%w: %q not in %s.%s", ErrKeyColumn, d.column, m.Namespace, m.RelationName)
	case d.value != "" && rel.valIdx < 0:
		return fmt.Errorf("%w: value column %q not in %s.%s", ErrKeyColumn, d.value, m.Namespace, m.RelationName)
	}
	rel.ours = true
	d.rels[m.RelationID] = rel
	return nil
}

func (d *decoder) change(relID uint32) (relation, error) {
	if !d.inTxn {
		return relation{}, fmt.Errorf("%w: change outside a transaction", ErrProtocol)
	}
	rel, ok := d.rels[relID]
	if !ok {
		return relation{}, fmt.Errorf("%w: change for relation %d before its Relation message", ErrProtocol, relID)
	}
	return rel, nil
}

// column states of the key in one tuple.
const (
	colValue   = iota // a text value
	colNull           // SQL NULL
	colUnknown        // not sent: unchanged TOAST, or outside the replica identity
)

// column returns the kind and the bytes of column i of the TupleData at the
// start of t, which sizesValid accepted; ok is false when the tuple has no
// column i.
func column(t []byte, i int) (kind byte, data []byte, ok bool) {
	if i < 0 || i >= int(binary.BigEndian.Uint16(t)) {
		return 0, nil, false
	}
	t = t[2:]
	for j := 0; ; j++ {
		kind, t = t[0], t[1:]
		data = nil
		if kind == pglogrepl.TupleDataTypeText || kind == pglogrepl.TupleDataTypeBinary {
			n := binary.BigEndian.Uint32(t)
			data, t = t[4:4+n], t[4+n:]
		}
		if j == i {
			return kind, data, true
		}
	}
}

// key returns the key column of tuple t: its state and, for colValue, its
// bytes in the message.
func key(rel relation, t []byte) (int, []byte, error) {
	kind, data, ok := column(t, rel.keyIdx)
	if !ok {
		return 0, nil, fmt.Errorf("%w: tuple without the key column", ErrProtocol)
	}
	switch kind {
	case pglogrepl.TupleDataTypeText:
		return colValue, data, nil
	case pglogrepl.TupleDataTypeNull:
		return colNull, nil, nil
	case pglogrepl.TupleDataTypeToast:
		return colUnknown, nil, nil
	}
	return 0, nil, fmt.Errorf("%w: key column in format %q", ErrProtocol, kind)
}

// oldKey reads the key from an old tuple ('K' or 'O'). Under an index
// replica identity, columns outside the index arrive as NULL: unknown.
func oldKey(rel relation, kind uint8, t []byte) (int, []byte, error) {
	st, k, err := key(rel, t)
	if err != nil {
		return 0, nil, err
	}
	if st == colNull && kind == 'K' && !rel.identity {
		st = colUnknown
	}
	return st, k, nil
}

// keep returns a copy of b for a Change (nil stays nil, empty stays
// non-nil), cut from the current chunk.
func (d *decoder) keep(b []byte) []byte {
	switch {
	case b == nil:
		return nil
	case len(b) > bytesChunk/8:
		return append(make([]byte, 0, len(b)), b...)
	case d.bytes == nil || cap(d.bytes)-len(d.bytes) < len(b):
		d.bytes = make([]byte, 0, min(max(bytesChunk, 2*cap(d.bytes)), maxBytes))
	}
	n := len(d.bytes)
	d.bytes = append(d.bytes, b...)
	return d.bytes[n:len(d.bytes):len(d.bytes)]
}

// push appends c to the open transaction's Changes, moving them to a new
// chunk when the current one is full.
func (d *decoder) push(c changefeed.Change) {
	if len(d.chg) == cap(d.chg) {
		open := d.chg[d.first:]
		grown := make([]changefeed.Change, len(open), max(changesChunk, min(2*cap(d.chg), maxChanges), 2*len(open)))
		copy(grown, open)
		d.chg, d.first = grown, 0
	}
	d.chg = append(d.chg, c)
}

// cut returns the open transaction's Changes (nil for none) and closes it.
func (d *decoder) cut() []changefeed.Change {
	var cs []changefeed.Change
	if n := len(d.chg); n > d.first {
		cs = d.chg[d.first:n:n]
	}
	d.first = len(d.chg)
	if cap(d.chg) > maxChanges {
		d.chg, d.first = nil, 0
	}
	return cs
}

// add adds a Change; k is the key's bytes in the message.
func (d *decoder) add(kind changefeed.Kind, k []byte) {
	d.push(changefeed.Change{Kind: kind, Key: d.keep(k)})
}

// addValue adds an Insert of the new tuple t with its value column: nil
// when NULL or not sent.
func (d *decoder) addValue(rel relation, k []byte, t []byte) {
	var v []byte
	if kind, data, ok := column(t, rel.valIdx); ok && kind == pglogrepl.TupleDataTypeText {
		v = d.keep(data)
	}
	d.push(changefeed.Change{Kind: changefeed.Insert, Key: d.keep(k), Value: v})
}

func (d *decoder) insert(rel relation, t []byte) error {
	st, k, err := key(rel, t)
	if err != nil {
		return err
	}
	switch {
	case st == colUnknown:
		return fmt.Errorf("%w: inserted row without its key", ErrProtocol)
	case st == colValue && rel.valIdx >= 0:
		d.addValue(rel, k, t)
	case st == colValue:
		d.add(changefeed.Insert, k)
	}
	return nil
}

// update decodes an UPDATE: oldKind is 'K' or 'O' with the old tuple, 0
// without one.
func (d *decoder) update(rel relation, oldKind byte, oldTup, newTup []byte) error {
	newSt, newKey, err := key(rel, newTup)
	if err != nil {
		return err
	}
	if rel.valIdx >= 0 {
		return d.updateValue(rel, oldKind, oldTup, newTup, newSt, newKey)
	}
	if newSt == colUnknown {
		// Unchanged TOAST: the key column was not modified.
		return nil
	}
	oldSt := colUnknown
	var old []byte
	switch oldKind {
	case pglogrepl.UpdateMessageTupleTypeKey, pglogrepl.UpdateMessageTupleTypeOld:
		if oldSt, old, err = oldKey(rel, oldKind, oldTup); err != nil {
			return err
		}
	default:
		// No old tuple: the replica identity did not change. If the key is
		// part of it, the key did not change either.
		if rel.identity {
			return nil
		}
	}
	if oldSt == colValue && newSt == colValue && bytes.Equal(old, newKey) {
		return nil
	}
	if oldSt == colNull && newSt == colNull {
		return nil
	}
	switch oldSt {
	case colValue:
		d.add(changefeed.Delete, old)
	case colUnknown:
		d.add(changefeed.UnknownDelete, nil)
	}
	if newSt == colValue {
		d.add(changefeed.Insert, newKey)
	}
	return nil
}

func (d *decoder) remove(rel relation, kind byte, t []byte) error {
	st, k, err := oldKey(rel, kind, t)
	if err != nil {
		return err
	}
	switch st {
	case colValue:
		d.add(changefeed.Delete, k)
	case colUnknown:
		d.add(changefeed.UnknownDelete, nil)
	}
	return nil
}

// updateValue decodes an UPDATE for a feed with a value column: the new
// side is always an Insert carrying the value (an update may move the
// value, such as an expiry, with the key unchanged), with a nil Key when the
// server did not resend an unchanged key (TOAST); the old side is a Delete
// as without a value column.
func (d *decoder) updateValue(rel relation, oldKind byte, oldTup, newTup []byte, newSt int, newKey []byte) error {
	switch oldKind {
	case pglogrepl.UpdateMessageTupleTypeKey, pglogrepl.UpdateMessageTupleTypeOld:
		oldSt, old, err := oldKey(rel, oldKind, oldTup)
		if err != nil {
			return err
		}
		switch {
		case oldSt == colValue && (newSt != colValue || !bytes.Equal(old, newKey)):
			d.add(changefeed.Delete, old)
		case oldSt == colUnknown:
			d.add(changefeed.UnknownDelete, nil)
		}
	default:
		if !rel.identity && newSt != colUnknown {
			d.add(changefeed.UnknownDelete, nil)
		}
	}
	switch newSt {
	case colValue:
		d.addValue(rel, newKey, newTup)
	case colUnknown:
		d.addValue(rel, nil, newTup)
	}
	return nil
}
