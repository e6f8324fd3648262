package postgres

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

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
type decoder struct {
	relID  uint32 // OID of the configured table
	column string
	value  string // FeedConfig.ValueColumn; "" for none
	rels   map[uint32]relation
	inTxn  bool
	txn    changefeed.Txn
}

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
// on a Commit, nil otherwise.
func (d *decoder) message(data []byte) (*changefeed.Txn, error) {
	m, err := parse(data)
	if err != nil {
		return nil, err
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		if d.inTxn {
			return nil, fmt.Errorf("%w: Begin inside a transaction", ErrProtocol)
		}
		d.inTxn = true
		d.txn = changefeed.Txn{}
		return nil, nil
	case *pglogrepl.CommitMessage:
		if !d.inTxn {
			return nil, fmt.Errorf("%w: Commit outside a transaction", ErrProtocol)
		}
		if m.TransactionEndLSN <= m.CommitLSN {
			return nil, fmt.Errorf("%w: Commit ends at %s, before its start %s", ErrProtocol, m.TransactionEndLSN, m.CommitLSN)
		}
		d.inTxn = false
		t := d.txn
		t.Commit, t.End, t.Time = changefeed.Position(m.CommitLSN), changefeed.Position(m.TransactionEndLSN), m.CommitTime
		d.txn = changefeed.Txn{}
		return &t, nil
	case *pglogrepl.RelationMessage:
		return nil, d.relation(m)
	case *pglogrepl.InsertMessage:
		rel, err := d.change(m.RelationID)
		if err != nil || !rel.ours {
			return nil, err
		}
		return nil, d.insert(rel, m.Tuple)
	case *pglogrepl.UpdateMessage:
		rel, err := d.change(m.RelationID)
		if err != nil || !rel.ours {
			return nil, err
		}
		return nil, d.update(rel, m)
	case *pglogrepl.DeleteMessage:
		rel, err := d.change(m.RelationID)
		if err != nil || !rel.ours {
			return nil, err
		}
		return nil, d.remove(rel, m)
	case *pglogrepl.TruncateMessage:
		if !d.inTxn {
			return nil, fmt.Errorf("%w: Truncate outside a transaction", ErrProtocol)
		}
		for _, id := range m.RelationIDs {
			if id == d.relID {
				d.txn.Changes = append(d.txn.Changes, changefeed.Change{Kind: changefeed.Truncate})
				break
			}
		}
		return nil, nil
	case *pglogrepl.OriginMessage, *pglogrepl.TypeMessage, *pglogrepl.LogicalDecodingMessage:
		return nil, nil
	}
	return nil, fmt.Errorf("%w: type %q", ErrProtocol, data[0])
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

// key returns the key column of t: its state and, for colValue, a copy.
func key(rel relation, t *pglogrepl.TupleData) (int, []byte, error) {
	if t == nil || rel.keyIdx >= len(t.Columns) || t.Columns[rel.keyIdx] == nil {
		return 0, nil, fmt.Errorf("%w: tuple without the key column", ErrProtocol)
	}
	c := t.Columns[rel.keyIdx]
	switch c.DataType {
	case pglogrepl.TupleDataTypeText:
		return colValue, bytes.Clone(c.Data), nil
	case pglogrepl.TupleDataTypeNull:
		return colNull, nil, nil
	case pglogrepl.TupleDataTypeToast:
		return colUnknown, nil, nil
	}
	return 0, nil, fmt.Errorf("%w: key column in format %q", ErrProtocol, c.DataType)
}

// oldKey reads the key from an old tuple ('K' or 'O'). Under an index
// replica identity, columns outside the index arrive as NULL: unknown.
func oldKey(rel relation, kind uint8, t *pglogrepl.TupleData) (int, []byte, error) {
	st, k, err := key(rel, t)
	if err != nil {
		return 0, nil, err
	}
	if st == colNull && kind == 'K' && !rel.identity {
		st = colUnknown
	}
	return st, k, nil
}

func (d *decoder) add(kind changefeed.Kind, k []byte) {
	d.txn.Changes = append(d.txn.Changes, changefeed.Change{Kind: kind, Key: k})
}

// addValue adds an Insert of the new tuple t with its value column: nil
// when NULL or not sent.
func (d *decoder) addValue(rel relation, k []byte, t *pglogrepl.TupleData) {
	var v []byte
	if rel.valIdx < len(t.Columns) {
		if c := t.Columns[rel.valIdx]; c != nil && c.DataType == pglogrepl.TupleDataTypeText {
			v = bytes.Clone(c.Data)
		}
	}
	d.txn.Changes = append(d.txn.Changes, changefeed.Change{Kind: changefeed.Insert, Key: k, Value: v})
}

func (d *decoder) insert(rel relation, t *pglogrepl.TupleData) error {
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

func (d *decoder) update(rel relation, m *pglogrepl.UpdateMessage) error {
	newSt, newKey, err := key(rel, m.NewTuple)
	if err != nil {
		return err
	}
	if rel.valIdx >= 0 {
		return d.updateValue(rel, m, newSt, newKey)
	}
	if newSt == colUnknown {
		// Unchanged TOAST: the key column was not modified.
		return nil
	}
	oldSt := colUnknown
	var old []byte
	switch m.OldTupleType {
	case pglogrepl.UpdateMessageTupleTypeKey, pglogrepl.UpdateMessageTupleTypeOld:
		if oldSt, old, err = oldKey(rel, m.OldTupleType, m.OldTuple); err != nil {
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

func (d *decoder) remove(rel relation, m *pglogrepl.DeleteMessage) error {
	st, k, err := oldKey(rel, m.OldTupleType, m.OldTuple)
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
func (d *decoder) updateValue(rel relation, m *pglogrepl.UpdateMessage, newSt int, newKey []byte) error {
	switch m.OldTupleType {
	case pglogrepl.UpdateMessageTupleTypeKey, pglogrepl.UpdateMessageTupleTypeOld:
		oldSt, old, err := oldKey(rel, m.OldTupleType, m.OldTuple)
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
		d.addValue(rel, newKey, m.NewTuple)
	case colUnknown:
		d.addValue(rel, nil, m.NewTuple)
	}
	return nil
}
