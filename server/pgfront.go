package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/serve/pgwire"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// answerStatements returns the statements the PostgreSQL front end
// answers: each set's answer statements are checked (shape, then on the
// database), and each set gets a connection for reading the WAL insert
// position. The returned closers close the connections; they are
// returned with an error too.
func answerStatements(ctx context.Context, cfg *Config, store *serve.Store) ([]pgwire.Statement, []func(), error) {
	var closers []func()
	var stmts []pgwire.Statement
	for i := range cfg.Sets {
		d := &cfg.Sets[i]
		if len(d.Answers) == 0 {
			continue
		}
		set := store.Set(d.Name)
		if set == nil {
			return nil, closers, fmt.Errorf("set %q: answer: not a table-backed set", d.Name)
		}
		timeout := d.connectTimeout()
		cctx, cancel := context.WithTimeout(ctx, timeout)
		pool, err := postgres.Connect(cctx, d.Source.DSN)
		cancel()
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: answer: postgres: %w", d.Name, err)
		}
		closers = append(closers, pool.Close)
		// The insert position on a connection of its own, bounded as long
		// as a query waits for it (the front end's default).
		cctx, cancel = context.WithTimeout(ctx, timeout)
		positions, err := postgres.NewPositionReader(cctx, d.Source.DSN, pgwire.DefaultPositionTimeout)
		cancel()
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: answer: postgres: %w", d.Name, err)
		}
		closers = append(closers, func() { positions.Close() })
		read := positions.Read
		table, column := d.Source.Table, d.Source.Column
		// Every read also checks that the table is still what the set was
		// built from: a rename, a rewrite, a new child or partition, a key
		// column's new type or collation reach no change feed.
		cctx, cancel = context.WithTimeout(ctx, timeout)
		err = positions.Watch(cctx, table, column)
		cancel()
		if err != nil {
			return nil, closers, fmt.Errorf("set %q: answer: %w", d.Name, err)
		}
		for _, sql := range d.Answers {
			tmpl, err := pgwire.ParseTemplate(sql, table, column)
			if err != nil {
				return nil, closers, fmt.Errorf("set %q: answer %q: %w", d.Name, sql, err)
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			db, oids, err := postgres.CheckAnswer(cctx, pool, table, tmpl.Table(), column, sql)
			cancel()
			if err != nil {
				return nil, closers, fmt.Errorf("set %q: answer %q: %w", d.Name, sql, err)
			}
			stmts = append(stmts, pgwire.Statement{SetName: d.Name, SQL: sql, Table: table, Column: column,
				Database: db, ParamOIDs: oids, Set: set, ReadPosition: read})
		}
		pool.Close() // the checks' only: the reads have their own connection
	}
	return stmts, closers, nil
}

// frontConfig is the front end's pgwire.Config: without statements, it
// relays every statement while the sets connect (Server.Answer adds them).
func frontConfig(cfg *Config, tlsConfig *tls.Config, reg prometheus.Registerer, log *slog.Logger) pgwire.Config {
	p := cfg.PostgresFront
	return pgwire.Config{
		Upstream: p.Upstream, TLSConfig: tlsConfig, MaxConns: p.MaxConns, MaxMessageSize: int(p.MaxMessageSize),
		PositionWait: p.PositionWait, Logger: log, Registerer: reg,
	}
}
