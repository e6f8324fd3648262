package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestPositionReaderWatch: after Watch, a read fails with ErrTableChanged
// once the table's name means another relation, its rows were rewritten,
// its key column's type or collation changed, it gained a child or a
// partition, or an = operator for text appeared outside pg_catalog — each
// a change a set built from the table would not see through its feed —
// and keeps failing; DDL that changes none of it (a new column, an index)
// and row changes do not fail a read. Watch refuses a table with
// inheritance children and a database with such an operator.
func TestPositionReaderWatch(t *testing.T) {
	dsn := testsvc.LogicalPostgres(t).DSN // a database of its own: the operator below is database-wide
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	exec := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	n := 0
	for _, c := range []struct {
		name    string
		partial bool     // a partitioned table
		change  []string // {T} is the table's name
		changed bool
	}{
		{"insert, update, delete, new column, index", false, []string{"INSERT INTO {T} VALUES ('b')", "UPDATE {T} SET email = 'c' WHERE email = 'b'",
			"DELETE FROM {T} WHERE email = 'c'", "ALTER TABLE {T} ADD COLUMN n int", "CREATE INDEX ON {T} (n)"}, false},
		{"renamed, another table named so", false, []string{"CREATE TABLE {T}_new (LIKE {T})", "ALTER TABLE {T} RENAME TO {T}_old", "ALTER TABLE {T}_new RENAME TO {T}"}, true},
		{"dropped and created again", false, []string{"DROP TABLE {T}", "CREATE TABLE {T} (email text)"}, true},
		{"dropped", false, []string{"DROP TABLE {T}"}, true},
		{"rows rewritten", false, []string{"ALTER TABLE {T} ALTER COLUMN email TYPE text USING upper(email)"}, true},
		{"truncated", false, []string{"TRUNCATE {T}"}, true},
		{"column type", false, []string{"ALTER TABLE {T} ALTER COLUMN email TYPE varchar(40)"}, true},
		{"column collation", false, []string{`ALTER TABLE {T} ALTER COLUMN email TYPE text COLLATE "C"`}, true},
		{"column dropped and added again", false, []string{"ALTER TABLE {T} DROP COLUMN email", "ALTER TABLE {T} ADD COLUMN email text"}, true},
		{"inheritance child", false, []string{"CREATE TABLE {T}_child () INHERITS ({T})"}, true},
		{"= for text outside pg_catalog", false, []string{"CREATE SCHEMA {T}_ops", "CREATE FUNCTION {T}_ops.eq(text, text) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT lower($1) = lower($2)'",
			"CREATE OPERATOR {T}_ops.= (LEFTARG = text, RIGHTARG = text, FUNCTION = {T}_ops.eq)"}, true},
		{"partition attached", true, []string{"CREATE TABLE {T}_p2 (email text)", "INSERT INTO {T}_p2 VALUES ('zz')", "ALTER TABLE {T} ATTACH PARTITION {T}_p2 FOR VALUES FROM ('m') TO (MAXVALUE)"}, true},
	} {
		n++
		table := fmt.Sprintf("watch_%d_%d", time.Now().UnixNano()%1e6, n)
		if c.partial {
			exec("CREATE TABLE "+table+" (email text) PARTITION BY RANGE (email)",
				"CREATE TABLE "+table+"_p1 PARTITION OF "+table+" FOR VALUES FROM (MINVALUE) TO ('m')")
		} else {
			exec("CREATE TABLE " + table + " (email text)")
		}
		exec("INSERT INTO " + table + " VALUES ('a')")
		t.Cleanup(func() {
			for _, sql := range []string{"DROP TABLE IF EXISTS " + table + "_child", "DROP TABLE IF EXISTS " + table + " CASCADE",
				"DROP TABLE IF EXISTS " + table + "_old CASCADE", "DROP TABLE IF EXISTS " + table + "_new", "DROP TABLE IF EXISTS " + table + "_p2",
				"DROP SCHEMA IF EXISTS " + table + "_ops CASCADE"} {
				admin.Exec(context.Background(), sql)
			}
		})
		r, err := postgres.NewPositionReader(ctx, dsn, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.Watch(ctx, "public."+table, "email"); err != nil {
			t.Fatalf("%s: Watch: %v", c.name, err)
		}
		if _, err := r.Read(ctx); err != nil {
			t.Fatalf("%s: a read before the change: %v", c.name, err)
		}
		for _, sql := range c.change {
			exec(strings.ReplaceAll(sql, "{T}", table))
		}
		for i := range 2 {
			_, err := r.Read(ctx)
			if got := errors.Is(err, changefeed.ErrTableChanged); got != c.changed {
				t.Errorf("%s: read %d after the change: %v, want ErrTableChanged: %v", c.name, i+1, err, c.changed)
			}
			if !c.changed && err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
		if c.name == "inheritance child" || c.name == "= for text outside pg_catalog" {
			r2, err := postgres.NewPositionReader(ctx, dsn, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := r2.Watch(ctx, "public."+table, "email"); err == nil {
				t.Errorf("%s: Watch accepted the table", c.name)
			}
			r2.Close()
			exec("DROP SCHEMA IF EXISTS "+table+"_ops CASCADE", "DROP TABLE IF EXISTS "+table+"_child")
		}
	}
}

// BenchmarkPositionRead: one insert position read, alone and with Watch's
// check of the table's definition in the same statement.
func BenchmarkPositionRead(b *testing.B) {
	dsn := testsvc.Postgres(b)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	table := fmt.Sprintf("watch_bench_%d", time.Now().UnixNano()%1e6)
	if _, err := admin.Exec(ctx, "CREATE TABLE "+table+" (email text PRIMARY KEY)"); err != nil {
		b.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP TABLE "+table)
	for _, watch := range []bool{false, true} {
		b.Run(fmt.Sprintf("watch=%v", watch), func(b *testing.B) {
			r, err := postgres.NewPositionReader(ctx, dsn, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if watch {
				if err := r.Watch(ctx, "public."+table, "email"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
