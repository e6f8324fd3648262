package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/serve/pgwire"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// postgresFrontDecl is the PostgreSQL front end's part of the config file:
//
//	postgres-listen 127.0.0.1:6432
//	postgres-upstream 127.0.0.1:5432
//	postgres-maxclients 1000            # pgwire.Config.MaxConns
//	postgres-max-message-size 64mb      # pgwire.Config.MaxMessageSize
//	postgres-position-wait 100ms        # pgwire.Config.PositionWait
//
// and "answer" lines in set blocks. Zero values mean pgwire's defaults.
type postgresFrontDecl struct {
	Listen, Upstream string
	MaxConns         int
	MaxMessageSize   int64
	PositionWait     time.Duration
	line             int // of postgres-listen, for errors
}

func (p *postgresFrontDecl) apply(l confLine) error {
	var err error
	switch l.key {
	case "postgres-listen":
		p.Listen, p.line = l.value, l.n
	case "postgres-upstream":
		if _, _, err := net.SplitHostPort(l.value); err != nil {
			return l.errorf("want the PostgreSQL server's host:port")
		}
		p.Upstream = l.value
	case "postgres-maxclients":
		p.MaxConns, err = l.positiveInt()
	case "postgres-max-message-size":
		p.MaxMessageSize, err = l.bytes()
		if err == nil && (p.MaxMessageSize < 1024 || p.MaxMessageSize > 1<<30) {
			return l.errorf("want a size from 1kb to 1gb")
		}
	case "postgres-position-wait":
		p.PositionWait, err = l.positiveDuration()
	}
	return err
}

func (p *postgresFrontDecl) check(sets []setDecl) error {
	for _, s := range sets {
		for _, sql := range s.Answers {
			if _, err := pgwire.ParseTemplate(sql, s.Table, s.Column); err != nil {
				return fmt.Errorf("line %s: set %q: answer %q: %w", s.Line, s.Name, sql, err)
			}
		}
	}
	if p.Listen != "" && p.Upstream == "" {
		return fmt.Errorf("line %d: postgres-listen: give postgres-upstream (the PostgreSQL server's host:port)", p.line)
	}
	if p.Listen == "" {
		for _, s := range sets {
			if len(s.Answers) > 0 {
				return fmt.Errorf("line %s: set %q: answer: give postgres-listen (the PostgreSQL front end is off)", s.Line, s.Name)
			}
		}
	}
	return nil
}

// startPostgresFront starts the PostgreSQL front end when the config file
// asks for it: each set's answer statements are checked (shape, then on the
// database), each set gets a small pool for reading the WAL insert
// position. The returned func closes the pools.
func startPostgresFront(ctx context.Context, file *serveFile, store *serve.Store, reg prometheus.Registerer, log *slog.Logger, errc chan<- error) (*pgwire.Server, func(), error) {
	p := file.Postgres
	if p.Listen == "" {
		return nil, func() {}, nil
	}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var stmts []pgwire.Statement
	for _, d := range file.Sets {
		if len(d.Answers) == 0 {
			continue
		}
		set := store.Set(d.Name)
		if set == nil {
			return nil, closeAll, fmt.Errorf("set %q: answer: not a table-backed set", d.Name)
		}
		timeout := orDefault(d.ConnectTimeout, defaultConnectTimeout)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		pool, err := postgres.Connect(cctx, d.Postgres)
		cancel()
		if err != nil {
			return nil, closeAll, fmt.Errorf("set %q: answer: postgres: %w", d.Name, err)
		}
		closers = append(closers, pool.Close)
		read := func(ctx context.Context) (changefeed.Position, error) { return postgres.WritePosition(ctx, pool) }
		for _, sql := range d.Answers {
			if _, err := pgwire.ParseTemplate(sql, d.Table, d.Column); err != nil {
				return nil, closeAll, fmt.Errorf("set %q: answer %q: %w", d.Name, sql, err)
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			db, oid, err := postgres.CheckAnswer(cctx, pool, d.Table, d.Column, sql)
			cancel()
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: answer %q: %w", d.Name, sql, err)
			}
			stmts = append(stmts, pgwire.Statement{SetName: d.Name, SQL: sql, Table: d.Table, Column: d.Column,
				Database: db, ParamOID: oid, Set: set, ReadPosition: read})
		}
	}
	srv, err := pgwire.New(pgwire.Config{
		Upstream: p.Upstream, Statements: stmts, MaxConns: p.MaxConns, MaxMessageSize: int(p.MaxMessageSize),
		PositionWait: p.PositionWait, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, closeAll, err
	}
	ln, err := net.Listen("tcp", p.Listen)
	if err != nil {
		return nil, closeAll, err
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, pgwire.ErrClosed) {
			errc <- err
		}
	}()
	log.Info("serving the PostgreSQL protocol", "addr", ln.Addr().String(), "upstream", p.Upstream, "answers", len(stmts))
	return srv, closeAll, nil
}
