package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Creating a logical slot waits until every transaction that was running
// when it started has ended, cluster-wide: one session left idle in a
// transaction stalls the feed's bootstrap for as long as it stays open.
// That wait is legitimate, so Timeout does not bound it, but it must not be
// silent: watchSlotWait logs, every Timeout while the creation lasts, which
// sessions it is waiting for.

// slotWaiters lists the sessions holding a transaction ID, those a slot's
// creation waits for. They are found in pg_locks (each such transaction
// holds the lock on its own ID), which every role can read: the role feed
// setup creates sees no other role's backend_xid, state, transaction start
// or query in pg_stat_activity (pg_read_all_stats would show them), only
// its user and database, so those fields are "hidden" for such sessions.
const slotWaiters = `SELECT l.pid, coalesce(a.datname, ''), coalesce(a.usename, ''), coalesce(a.state, ''),
	coalesce(extract(epoch FROM now() - a.xact_start)::float8, -1), left(coalesce(a.query, ''), 80)
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted AND l.pid <> pg_backend_pid()
	AND coalesce(a.backend_type, 'client backend') = 'client backend'
ORDER BY a.xact_start NULLS LAST, l.pid LIMIT 5`

// watchSlotWait logs while a slot's creation runs longer than Timeout,
// until the returned stop is called.
func (f *Feed) watchSlotWait(ctx context.Context, slot string) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		t := time.NewTicker(f.cfg.Timeout)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			f.cfg.Logger.Warn("bloomgate: creating the replication slot waits for transactions running on the server to end; "+
				"the feed starts once they commit or roll back",
				"slot", slot, "waiting", time.Since(start).Round(time.Second), "transactions", f.slotWaiters(wctx))
		}
	}()
	return func() { cancel(); <-done }
}

// slotWaiters describes the sessions a slot's creation may be waiting for.
func (f *Feed) slotWaiters(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	rows, err := f.pool.Query(qctx, slotWaiters)
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var pid int
		var db, user, state, query string
		var age float64
		if err := rows.Scan(&pid, &db, &user, &state, &age, &query); err != nil {
			return "unknown: " + err.Error()
		}
		if age < 0 { // another role's session: pg_stat_activity hides the rest
			out = append(out, fmt.Sprintf("pid %d (%s@%s, state, age and query hidden from this role)", pid, user, db))
			continue
		}
		out = append(out, fmt.Sprintf("pid %d (%s@%s, %s for %.0fs: %q)", pid, user, db, state, age, query))
	}
	if err := rows.Err(); err != nil {
		return "unknown: " + err.Error()
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}
