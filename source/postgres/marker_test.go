package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestFeedMarksQuietWAL: WAL written after the stream's last transaction
// by something the publication does not carry (another table here) is
// reached by a progress marker without waiting for the next status
// update. A writer's position taken after its commit is often beyond the
// commit's end; a quiet table's last write would otherwise stay
// unreached until the next StatusInterval (an hour here; the server's own
// keepalive is off: wal_sender_timeout 0).
func TestFeedMarksQuietWAL(t *testing.T) {
	fx := feedFixtureOn(t, testsvc.LogicalPostgres(t).DSN+"&options=-c%20wal_sender_timeout%3D0", "")
	fx.cfg.StatusInterval = time.Hour
	fx.exec(t, "CREATE TABLE "+fx.name+".other (v int)")
	f := fx.feed(t)
	c := newConsumer()
	p, err := f.Bootstrap(context.Background(), c.add)
	if err != nil {
		t.Fatal(err)
	}
	stop := c.stream(f, p)
	defer stop()
	for i := range 3 {
		fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ($1)", time.Now().String())
		testsvc.Eventually(t, waitLimit, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.keys) == i+1
		}, "row %d not delivered", i)
		time.Sleep(50 * time.Millisecond) // the stream falls quiet
		fx.exec(t, "INSERT INTO "+fx.name+".other VALUES (1)")
		start := time.Now()
		c.waitFor(t, fx.walEnd(t))
		t.Logf("reached in %v", time.Since(start))
	}
}
