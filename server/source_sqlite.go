package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/bloomgate/bloomgate/source/sqlite"
)

func init() { registerSource(SourceSQLite, sourceDriver{name: "sqlite", open: openSQLite}) }

// openSQLite opens a set's SQLite file. SQLite has no change feed: its
// sets are rebuild-only (rescan-only when expiring).
func openSQLite(ctx context.Context, s *SetConfig, _ *slog.Logger) (*openedSource, error) {
	db, err := sqlite.Open(s.Source.DSN)
	if err != nil {
		return nil, fmt.Errorf("set %q: sqlite: %w", s.Name, err)
	}
	o := &openedSource{closers: []func(){func() { db.Close() }}}
	src := s.Source
	if s.expiring() {
		o.expiring = sqlite.Expiring{DB: db, Table: src.Table, KeyColumn: src.Column, ExpiresColumn: s.Expiring.ExpiresColumn, Query: src.Query}
		return o, nil
	}
	lite, err := sqlite.New(sqlite.Config{DB: db, Query: src.Query, Table: src.Table, Column: src.Column})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("set %q: %w", s.Name, err)
	}
	o.source = lite
	if src.Confirm != "" {
		c := sqlite.Confirm{DB: db, Query: src.Confirm}
		if err := c.Check(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("set %q: confirm: %w", s.Name, err)
		}
		o.confirm = c
	}
	return o, nil
}
