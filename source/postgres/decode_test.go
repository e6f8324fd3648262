package postgres

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/bloomgate/bloomgate/changefeed"
)

// pgoutput protocol 1 messages, encoded as the server sends them
// (https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html).

type col struct {
	kind byte // 'n', 'u', 't'
	val  string
}

func tuple(cols ...col) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind == 't' || c.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.val)))
			b = append(b, c.val...)
		}
	}
	return b
}

func msgBegin() []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, 0x100)
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, 42)
}

func msgCommit(commit, end uint64) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, commit)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, 0)
}

// msgRelation describes relation id with columns id, email, note; identity
// names the columns flagged as part of the replica identity.
func msgRelation(id uint32, replident byte, identity ...string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, "public\x00users\x00"...)
	b = append(b, replident)
	names := []string{"id", "email", "note"}
	b = binary.BigEndian.AppendUint16(b, uint16(len(names)))
	for _, n := range names {
		var flags byte
		for _, i := range identity {
			if i == n {
				flags = 1
			}
		}
		b = append(b, flags)
		b = append(b, n...)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, 25)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	return b
}

func msgInsert(rel uint32, t []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, rel)
	return append(append(b, 'N'), t...)
}

func msgUpdate(rel uint32, oldKind byte, old, new []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'U'}, rel)
	if oldKind != 0 {
		b = append(append(b, oldKind), old...)
	}
	return append(append(b, 'N'), new...)
}

func msgDelete(rel uint32, oldKind byte, old []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'D'}, rel)
	return append(append(b, oldKind), old...)
}

func msgTruncate(rels ...uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'T'}, uint32(len(rels)))
	b = append(b, 0)
	for _, r := range rels {
		b = binary.BigEndian.AppendUint32(b, r)
	}
	return b
}

func row(email col) []byte { return tuple(col{'t', "7"}, email, col{'t', "note"}) }
func keyOnly(id string) []byte {
	return tuple(col{'t', id}, col{'n', ""}, col{'n', ""})
}

var (
	tA   = col{'t', "a@x"}
	tB   = col{'t', "b@x"}
	null = col{'n', ""}
	tst  = col{'u', ""}
)

const ours, other = 16384, 99

func formatTxn(t *changefeed.Txn) string {
	var s []string
	for _, c := range t.Changes {
		if c.Key != nil {
			s = append(s, c.Kind.String()+" "+string(c.Key))
		} else {
			s = append(s, c.Kind.String())
		}
	}
	return fmt.Sprintf("%d-%d[%s]", t.Commit, t.End, strings.Join(s, ","))
}

// decodeAllMsgs runs msgs through a decoder and formats the transactions.
func decodeAllMsgs(msgs [][]byte) (string, error) {
	d := newDecoder(ours, "email", "")
	var out []string
	for _, m := range msgs {
		t, err := d.message(m)
		if err != nil {
			return strings.Join(out, " "), err
		}
		if t != nil {
			out = append(out, formatTxn(t))
		}
	}
	return strings.Join(out, " "), nil
}

func txn(msgs ...[]byte) [][]byte {
	return append(append([][]byte{msgBegin()}, msgs...), msgCommit(0x200, 0x230))
}

var (
	relDefault = msgRelation(ours, 'd', "id")
	relIndex   = msgRelation(ours, 'i', "email")
	relFull    = msgRelation(ours, 'f', "id", "email", "note")
)

func TestDecoder(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs [][]byte
		want string
		err  error
	}{
		{"insert", txn(relDefault, msgInsert(ours, row(tA))), "512-560[insert a@x]", nil},
		{"insert null key", txn(relDefault, msgInsert(ours, row(null))), "512-560[]", nil},
		{"other table ignored", txn(msgRelation(other, 'd', "id"), msgInsert(other, row(tA)), relDefault, msgInsert(ours, row(tB))), "512-560[insert b@x]", nil},
		{"truncate", txn(relDefault, msgTruncate(other, ours)), "512-560[truncate]", nil},
		{"truncate other", txn(relDefault, msgTruncate(other)), "512-560[]", nil},
		{"two txns", append(txn(relDefault, msgInsert(ours, row(tA))), txn(msgInsert(ours, row(tB)))...), "512-560[insert a@x] 512-560[insert b@x]", nil},

		{"default: update without old", txn(relDefault, msgUpdate(ours, 0, nil, row(tB))), "512-560[unknown-delete,insert b@x]", nil},
		{"default: update of the id", txn(relDefault, msgUpdate(ours, 'K', keyOnly("6"), row(tB))), "512-560[unknown-delete,insert b@x]", nil},
		{"default: delete", txn(relDefault, msgDelete(ours, 'K', keyOnly("7"))), "512-560[unknown-delete]", nil},
		{"default: toast-unchanged key", txn(relDefault, msgUpdate(ours, 0, nil, row(tst))), "512-560[]", nil},

		{"index: key changed", txn(relIndex, msgUpdate(ours, 'K', tuple(null, tA, null), row(tB))), "512-560[delete a@x,insert b@x]", nil},
		{"index: key unchanged", txn(relIndex, msgUpdate(ours, 0, nil, row(tB))), "512-560[]", nil},
		{"index: delete", txn(relIndex, msgDelete(ours, 'K', tuple(null, tA, null))), "512-560[delete a@x]", nil},

		{"full: key changed", txn(relFull, msgUpdate(ours, 'O', row(tA), row(tB))), "512-560[delete a@x,insert b@x]", nil},
		{"full: same key", txn(relFull, msgUpdate(ours, 'O', row(tA), row(tA))), "512-560[]", nil},
		{"full: to null", txn(relFull, msgUpdate(ours, 'O', row(tA), row(null))), "512-560[delete a@x]", nil},
		{"full: from null", txn(relFull, msgUpdate(ours, 'O', row(null), row(tA))), "512-560[insert a@x]", nil},
		{"full: toast in old", txn(relFull, msgUpdate(ours, 'O', row(tst), row(tA))), "512-560[unknown-delete,insert a@x]", nil},
		{"full: delete", txn(relFull, msgDelete(ours, 'O', row(tB))), "512-560[delete b@x]", nil},
		{"full: delete null", txn(relFull, msgDelete(ours, 'O', row(null))), "512-560[]", nil},

		{"empty message", [][]byte{{}}, "", ErrProtocol},
		{"relation without key column", [][]byte{msgBegin(), append(binary.BigEndian.AppendUint32([]byte{'R'}, ours), "public\x00users\x00d\x00\x00"...)}, "", ErrKeyColumn},
		{"change before relation", txn(msgInsert(ours, row(tA))), "", ErrProtocol},
		{"change outside txn", [][]byte{relDefault, msgInsert(ours, row(tA))}, "", ErrProtocol},
		{"commit outside txn", [][]byte{msgCommit(1, 2)}, "", ErrProtocol},
		{"nested begin", [][]byte{msgBegin(), msgBegin()}, "", ErrProtocol},
		{"end before commit", [][]byte{msgBegin(), msgCommit(5, 5)}, "", ErrProtocol},
		{"short tuple", txn(relDefault, msgInsert(ours, tuple(tA))), "", ErrProtocol},
		{"binary key", txn(relDefault, msgInsert(ours, row(col{'b', "x"}))), "", ErrProtocol},
		{"truncated insert", txn(relDefault, msgInsert(ours, row(tA))[:12]), "", ErrProtocol},
		{"stream start", [][]byte{{'S', 0, 0, 0, 1, 1}}, "", ErrProtocol},
		{"unknown type", [][]byte{{'Z'}}, "", ErrProtocol},
	} {
		got, err := decodeAllMsgs(tc.msgs)
		if !errors.Is(err, tc.err) || (tc.err == nil && got != tc.want) {
			t.Errorf("%s: got %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// FuzzDecoder: any sequence of messages never panics, and whatever comes
// out is well formed (End after Commit; keys exactly where kinds need them).
// Input: messages, each prefixed with a one-byte length.
func FuzzDecoder(f *testing.F) {
	join := func(msgs [][]byte) []byte {
		var b []byte
		for _, m := range msgs {
			if len(m) > 255 {
				continue
			}
			b = append(append(b, byte(len(m))), m...)
		}
		return b
	}
	f.Add(join(txn(relDefault, msgInsert(ours, row(tA)), msgUpdate(ours, 0, nil, row(tB)), msgDelete(ours, 'K', keyOnly("7")))))
	f.Add(join(txn(relIndex, msgUpdate(ours, 'K', tuple(null, tA, null), row(tB)), msgDelete(ours, 'K', tuple(null, tA, null)))))
	f.Add(join(txn(relFull, msgUpdate(ours, 'O', row(tst), row(tA)), msgTruncate(ours))))
	f.Add(join(txn(msgRelation(other, 'd', "id"), msgInsert(other, row(tA)))))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := newDecoder(ours, "email", "")
		for len(in) > 0 {
			n := int(in[0])
			in = in[1:]
			m := in[:min(n, len(in))]
			in = in[len(m):]
			tx, err := d.message(m)
			if err != nil {
				if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrKeyColumn) {
					t.Fatalf("error outside the documented ones: %v", err)
				}
				return
			}
			if tx == nil {
				continue
			}
			if tx.End <= tx.Commit {
				t.Fatalf("txn ends at %s, before its commit %s", tx.End, tx.Commit)
			}
			for _, c := range tx.Changes {
				switch c.Kind {
				case changefeed.Insert, changefeed.Delete:
					if c.Key == nil {
						t.Fatalf("%v without a key", c.Kind)
					}
				case changefeed.UnknownDelete, changefeed.Truncate:
					if c.Key != nil {
						t.Fatalf("%v with a key", c.Kind)
					}
				default:
					t.Fatalf("kind %v", c.Kind)
				}
			}
		}
	})
}

// TestDecoderValue: with a value column every insert and every update's new
// side is an Insert carrying the column's text (nil for NULL), even an
// update that kept the key, and one whose key was not resent.
func TestDecoderValue(t *testing.T) {
	format := func(t *changefeed.Txn) string {
		var s []string
		for _, c := range t.Changes {
			s = append(s, fmt.Sprintf("%v %q %q", c.Kind, c.Key, c.Value))
		}
		return strings.Join(s, ",")
	}
	rowV := func(email, note col) []byte { return tuple(col{'t', "7"}, email, note) }
	for _, tc := range []struct {
		name string
		msgs [][]byte
		want string
		err  error
	}{
		{"insert", txn(relIndex, msgInsert(ours, rowV(tA, col{'t', "v1"}))), `insert "a@x" "v1"`, nil},
		{"insert null value", txn(relIndex, msgInsert(ours, rowV(tA, null))), `insert "a@x" ""`, nil},
		{"index: key unchanged", txn(relIndex, msgUpdate(ours, 0, nil, rowV(tA, col{'t', "v2"}))), `insert "a@x" "v2"`, nil},
		{"index: key changed", txn(relIndex, msgUpdate(ours, 'K', tuple(null, tA, null), rowV(tB, col{'t', "v3"}))), `delete "a@x" "",insert "b@x" "v3"`, nil},
		{"default: update", txn(relDefault, msgUpdate(ours, 0, nil, rowV(tA, col{'t', "v4"}))), `unknown-delete "" "",insert "a@x" "v4"`, nil},
		{"full: same key", txn(relFull, msgUpdate(ours, 'O', rowV(tA, col{'t', "v1"}), rowV(tA, col{'t', "v5"}))), `insert "a@x" "v5"`, nil},
		{"key not resent", txn(relIndex, msgUpdate(ours, 0, nil, rowV(tst, col{'t', "v6"}))), `insert "" "v6"`, nil},
	} {
		d := newDecoder(ours, "email", "note")
		var got []string
		var err error
		for _, m := range tc.msgs {
			var tx *changefeed.Txn
			if tx, err = d.message(m); err != nil {
				break
			}
			if tx != nil {
				got = append(got, format(tx))
			}
		}
		if !errors.Is(err, tc.err) || tc.err == nil && strings.Join(got, " ") != tc.want {
			t.Errorf("%s: got %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
	if _, err := newDecoder(ours, "email", "expires").message(relIndex); !errors.Is(err, ErrKeyColumn) {
		t.Errorf("relation without the value column: %v, want ErrKeyColumn", err)
	}
	d := newDecoder(ours, "email", "note")
	d.message(msgBegin())
	d.message(relIndex)
	d.message(msgInsert(ours, rowV(tA, null)))
	if tx, _ := d.message(msgCommit(0x200, 0x230)); tx == nil || tx.Changes[0].Value != nil {
		t.Errorf("a NULL value: %+v, want a nil Value", tx)
	}
}

// TestDecoderKeepsKeys: the keys, values and Changes of delivered
// transactions are the consumer's: copied out of the message (which the
// connection's buffer overwrites), never written again by later
// transactions, whichever chunk they were cut from, and full to capacity so
// that a consumer's append cannot reach a neighbour.
func TestDecoderKeepsKeys(t *testing.T) {
	d := newDecoder(ours, "email", "note")
	rowV := func(email, note string) []byte { return tuple(col{'t', "7"}, col{'t', email}, col{'t', note}) }
	type kept struct {
		txn  changefeed.Txn
		want []string // key, value, key, value, …
	}
	var all []kept
	buf := make([]byte, 0, 1<<16) // one buffer for every message, as the connection's
	decode := func(m []byte) *changefeed.Txn {
		t.Helper()
		buf = append(buf[:0], m...)
		tx, err := d.message(buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = 0xff
		}
		return tx
	}
	decode(relIndex)
	for i := range 600 {
		decode(msgBegin())
		var want []string
		for j := range i%7 + i/150 {
			k := fmt.Sprintf("k%d.%d@x", i, j)
			if j == 2 {
				k = strings.Repeat("long", 200) + k // an allocation of its own
			}
			v := fmt.Sprintf("v%d", i*j)
			if j == 3 {
				v = "" // empty, not NULL
			}
			decode(msgInsert(ours, rowV(k, v)))
			want = append(want, k, v)
		}
		tx := decode(msgCommit(uint64(1000+2*i), uint64(1001+2*i)))
		all = append(all, kept{*tx, want})
	}
	for i, k := range all {
		if cap(k.txn.Changes) != len(k.txn.Changes) || len(k.txn.Changes)*2 != len(k.want) {
			t.Fatalf("txn %d: %d changes (capacity %d), want %d", i, len(k.txn.Changes), cap(k.txn.Changes), len(k.want)/2)
		}
		for j, c := range k.txn.Changes {
			if c.Kind != changefeed.Insert || string(c.Key) != k.want[2*j] || string(c.Value) != k.want[2*j+1] || c.Value == nil {
				t.Fatalf("txn %d change %d: %v %q %q, want insert %q %q", i, j, c.Kind, c.Key, c.Value, k.want[2*j], k.want[2*j+1])
			}
			if cap(c.Key) != len(c.Key) || cap(c.Value) != len(c.Value) {
				t.Fatalf("txn %d change %d: key or value with room beyond it", i, j)
			}
		}
	}
}

// TestDecoderRowMessages: malformed Begin, Commit, Insert, Update and Delete
// messages are ErrProtocol, for any table, and an empty key is a key.
func TestDecoderRowMessages(t *testing.T) {
	upd := msgUpdate(ours, 'K', tuple(null, tA, null), row(tB))
	for _, tc := range []struct {
		name string
		msgs [][]byte
		want string
		err  error
	}{
		{"empty key", txn(relIndex, msgInsert(ours, row(col{'t', ""}))), "512-560[insert ]", nil},
		{"insert of type K", txn(relIndex, append(binary.BigEndian.AppendUint32([]byte{'I'}, ours), append([]byte{'K'}, row(tA)...)...)), "", ErrProtocol},
		{"delete of type N", txn(relIndex, msgDelete(ours, 'N', row(tA))), "", ErrProtocol},
		{"update without its new tuple", txn(relIndex, upd[:len(upd)-len(row(tB))-1]), "", ErrProtocol},
		{"update with a second old tuple", txn(relIndex, append(upd[:len(upd)-len(row(tB))-1], append([]byte{'K'}, row(tB)...)...)), "", ErrProtocol},
		{"short delete", txn(relIndex, binary.BigEndian.AppendUint32([]byte{'D'}, ours)), "", ErrProtocol},
		{"short begin", [][]byte{msgBegin()[:20]}, "", ErrProtocol},
		{"short commit", [][]byte{msgBegin(), msgCommit(1, 2)[:25]}, "", ErrProtocol},
		{"other table, malformed", txn(relIndex, msgRelation(other, 'd', "id"), msgInsert(other, tuple(tA)[:4])), "", ErrProtocol},
	} {
		got, err := decodeAllMsgs(tc.msgs)
		if !errors.Is(err, tc.err) || (tc.err == nil && got != tc.want) {
			t.Errorf("%s: got %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// TestDecoderAllocs: decoding a transaction allocates less than once: its
// Changes, keys and values are cut from chunks shared by many transactions.
func TestDecoderAllocs(t *testing.T) {
	d := newDecoder(ours, "email", "")
	if _, err := d.message(relIndex); err != nil {
		t.Fatal(err)
	}
	begin, commit := msgBegin(), msgCommit(0x200, 0x230)
	one := msgInsert(ours, row(col{'t', "someone.else@example.com"}))
	upd := msgUpdate(ours, 'K', tuple(null, tA, null), row(tB))
	for name, msgs := range map[string][][]byte{
		"one insert":      {begin, one, commit},
		"an update":       {begin, upd, commit},
		"hundred inserts": append(append([][]byte{begin}, slices.Repeat([][]byte{one}, 100)...), commit),
	} {
		if n := testing.AllocsPerRun(200, func() {
			for _, m := range msgs {
				if _, err := d.message(m); err != nil {
					t.Fatal(err)
				}
			}
		}); n != 0 { // the average, rounded down
			t.Errorf("%s: %v allocations per transaction, want less than one", name, n)
		}
	}
}

// TestAppendStatus: the standby status update is the message pglogrepl
// sends for the same positions and time.
func TestAppendStatus(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 4, 5, 123456789, time.UTC)
	for _, reply := range []bool{false, true} {
		got := appendStatus(nil, 0x1_0000_2000, 0x1_0000_1000, now, reply)
		// pglogrepl.SendStandbyStatusUpdate's encoding.
		data := []byte{pglogrepl.StandbyStatusUpdateByteID}
		data = binary.BigEndian.AppendUint64(data, 0x1_0000_2000)
		data = binary.BigEndian.AppendUint64(data, 0x1_0000_1000)
		data = binary.BigEndian.AppendUint64(data, 0x1_0000_1000)
		data = binary.BigEndian.AppendUint64(data, uint64(now.Unix()*1000000+int64(now.Nanosecond())/1000-946684800*1000000))
		if reply {
			data = append(data, 1)
		} else {
			data = append(data, 0)
		}
		want, err := (&pgproto3.CopyData{Data: data}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("reply %v: %x, want %x", reply, got, want)
		}
	}
}
