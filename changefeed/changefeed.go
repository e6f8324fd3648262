// Package changefeed is the vocabulary shared by change feeds (such as
// source/postgres.Feed) and the code that consumes them: positions,
// committed transactions, and their effects on a set of keys. It has no
// dependencies, so a consumer can define the interface it needs in these
// terms without importing a database driver.
//
// Its types are plain values, safe to share once built. docs/design.md
// describes how a gate follows a feed.
package changefeed

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Position is a position in the source's log. Positions of one feed compare
// in log order; 0 is no position. What the number means is the source's (for
// PostgreSQL, an LSN): a source that writes positions its own way offers a
// Notation.
type Position uint64

// String formats p as a decimal integer, the form ParsePosition reads. A
// source's own spelling is its Notation's.
func (p Position) String() string { return strconv.FormatUint(uint64(p), 10) }

// Notation is how a source writes its positions for people and for clients'
// tokens (PostgreSQL's: an LSN, "16/B374D848", source/postgres.LSN). It is
// the source's, so layers that only pass positions along need not know it.
// Implementations are safe for concurrent use.
type Notation interface {
	// Format writes p.
	Format(p Position) string
	// Parse reads what Format writes; its errors wrap ErrBadPosition.
	Parse(s string) (Position, error)
	// String describes the notation in an error message: "an LSN such as
	// 16/B374D848".
	String() string
}

// Decimal is the notation of Position.String and ParsePosition: a decimal
// integer.
var Decimal Notation = decimal{}

type decimal struct{}

func (decimal) Format(p Position) string         { return p.String() }
func (decimal) Parse(s string) (Position, error) { return ParsePosition(s) }
func (decimal) String() string                   { return "a decimal integer" }

// ErrRebuild is wrapped by a feed's errors that mean the consumer's
// position can no longer be continued from (the feed lost the changes after
// it): the consumer must bootstrap again.
var ErrRebuild = errors.New("changefeed: position unusable, bootstrap again")

// ErrSetup is wrapped by a feed's errors that retrying cannot heal: the
// source is not set up for the feed (a permission, the publication, the
// table or its key column is missing, or logical decoding is off). An
// operator must fix it; the error says what.
var ErrSetup = errors.New("changefeed: source not set up for the feed")

// ErrTimeout is wrapped by a feed's errors when the source did not answer
// within the feed's timeout (a server that accepts connections and never
// replies, a network that drops packets). Retrying may heal it.
var ErrTimeout = errors.New("changefeed: no answer from the source in time")

// ErrBadPosition reports text that is not a Position.
var ErrBadPosition = errors.New("changefeed: bad position")

// ErrTableChanged reports that a source table's definition changed in a
// way its feed does not carry: its name now means another relation, its
// key column's type or collation changed, its rows were rewritten (ALTER
// … TYPE … USING, VACUUM FULL, CLUSTER, TRUNCATE), it gained or lost
// child tables or partitions, or an = operator outside pg_catalog may now
// compare its keys. What a set built from the old definition says about a
// key can then be wrong.
var ErrTableChanged = errors.New("changefeed: the table's definition changed")

// ParsePosition parses a decimal integer, the form Position.String writes:
// 1 to 20 ASCII digits, no sign, at most 2^64-1.
func ParsePosition(s string) (Position, error) {
	if s == "" || len(s) > 20 {
		return 0, fmt.Errorf("%w: %q", ErrBadPosition, s)
	}
	var v uint64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", ErrBadPosition, s)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("%w: %q", ErrBadPosition, s)
		}
		v = v*10 + d
	}
	return Position(v), nil
}

// Kind says what a Change does to the set of keys.
type Kind uint8

const (
	// Insert: a row with Key appeared (an INSERT, or the new side of an
	// UPDATE that changed the key or whose old key is unknown).
	Insert Kind = iota + 1
	// Delete: a row with Key disappeared (a DELETE, or the old side of an
	// UPDATE that changed the key). Only reported when the source knows the
	// old key (for PostgreSQL: a replica identity covering the key column).
	Delete
	// UnknownDelete: a row may have lost a key, but the source did not say
	// which. Key is nil. A filter cannot remove it; count it toward the
	// rebuild trigger.
	UnknownDelete
	// Truncate: the table was emptied, every key is gone. Key is nil.
	Truncate
)

func (k Kind) String() string {
	switch k {
	case Insert:
		return "insert"
	case Delete:
		return "delete"
	case UnknownDelete:
		return "unknown-delete"
	case Truncate:
		return "truncate"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Change is one effect of a committed transaction on the set of keys. NULL
// keys are never reported. Key is owned by the consumer (not reused).
type Change struct {
	Kind Kind
	Key  []byte
	// Value is, for a feed asked for one more column of the row (such as
	// source/postgres.FeedConfig.ValueColumn, an expiry), that column's text
	// form on an Insert; nil when NULL or not sent, and on every other
	// Kind. Such a feed reports every UPDATE's new side as an Insert, and
	// may report an Insert with a nil Key when the source did not resend an
	// unchanged key (the consumer cannot tell which key). Fan-out batches
	// (package fanout) do not carry it.
	Value []byte
}

// Txn is one committed transaction, or a progress marker.
//
// Changes are in the order the transaction made them. A Txn with no Changes
// is either a transaction that changed no key of the followed table, or a
// progress marker (Commit == End): the source reported that everything
// before End has been delivered. Either way the consumer records End as its
// position.
type Txn struct {
	// Commit is where the transaction's commit record starts. A rebuild
	// point P splits the stream: the rebuild's copy holds exactly the
	// transactions with Commit < P. For a progress marker Commit equals End.
	Commit Position
	// End is where the commit record ends: the delivery position. Positions
	// strictly increase along a stream; a consumer acknowledges End once the
	// transaction's effect is durable, and resumes after End.
	End Position
	// Time is the commit time by the source's clock (zero for progress).
	Time    time.Time
	Changes []Change
}
