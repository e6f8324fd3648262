package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Text types a key column may have for a statement answered from a set:
// their equality is byte equality of the text under a deterministic
// collation, the equality the set's filter answers for.
const (
	oidText    = 25
	oidVarchar = 1043
)

// CheckAnswer checks, on the database, a statement a set may answer for
// absent keys (the shape is checked by the front end): the key column is
// text or varchar with a deterministic collation, and the statement
// prepares with parameters all of such types (any valid text is then a
// valid value: an absent key's answer is no row whatever the others are).
// from is the relation the statement reads, schema-qualified: it must be
// the set's table as table resolves on this connection (the one the set
// follows), or the statement would answer for another table's rows.
// It returns the database's name and the parameters' type OIDs.
func CheckAnswer(ctx context.Context, pool *pgxpool.Pool, table, from, column, stmt string) (db string, paramOIDs []uint32, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return "", nil, err
	}
	defer conn.Release()
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return "", nil, err
	}
	var typ uint32
	var deterministic bool
	err = conn.QueryRow(ctx, `SELECT a.atttypid::oid, coalesce(c.collisdeterministic, true)
		FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = $1::regclass AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped`,
		table, column).Scan(&typ, &deterministic)
	if err != nil {
		return "", nil, fmt.Errorf("column %s.%s: %w", table, column, err)
	}
	if typ != oidText && typ != oidVarchar {
		return "", nil, fmt.Errorf("column %s.%s is not text or varchar: a statement on it cannot be answered from the set (its equality is not the key's text)", table, column)
	}
	if !deterministic {
		return "", nil, fmt.Errorf("column %s.%s has a nondeterministic collation: equal values may differ in bytes", table, column)
	}
	sd, err := conn.Conn().Prepare(ctx, "", stmt)
	if err != nil {
		return "", nil, fmt.Errorf("prepare: %w", err)
	}
	var same bool
	var setRel, fromRel string
	err = conn.QueryRow(ctx, `SELECT a.oid = b.oid, format('%I.%I', an.nspname, a.relname), format('%I.%I', bn.nspname, b.relname)
		FROM pg_class a JOIN pg_namespace an ON an.oid = a.relnamespace, pg_class b JOIN pg_namespace bn ON bn.oid = b.relnamespace
		WHERE a.oid = $1::regclass AND b.oid = $2::regclass`, table, from).Scan(&same, &setRel, &fromRel)
	if err != nil {
		return "", nil, fmt.Errorf("table %s: %w", from, err)
	}
	if !same {
		return "", nil, fmt.Errorf("FROM %s is not the set's table %s (%s): the statement must read the table the set follows", fromRel, table, setRel)
	}
	if len(sd.ParamOIDs) == 0 {
		return "", nil, errors.New("the statement has no parameter")
	}
	for i, oid := range sd.ParamOIDs {
		if oid != oidText && oid != oidVarchar {
			return "", nil, fmt.Errorf("the parameter $%d must be text or varchar (got types %v): a value of another type could fail to convert, an error and not \"no row\"", i+1, sd.ParamOIDs)
		}
	}
	return db, sd.ParamOIDs, nil
}
