package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestFastShutdownWhileFollowing: PostgreSQL's fast shutdown (pg_ctl stop
// -m fast) waits until a logical slot's consumer confirms all it was sent,
// and a following gate confirms only at its snapshots. After writes, with
// the stream quiet, the shutdown must complete (testsvc's Stop fails after
// 60 s); it used to wait for ever, the last snapshot behind what the
// server had sent and no transaction coming to take the next. Afterwards
// the gate restarts from its snapshot with every row.
func TestFastShutdownWhileFollowing(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	pg := testsvc.NewPostgres(t, testsvc.PGOptions{})
	fx := feedFixtureOn(t, pg.DSN, "")
	snaps := bloomgate.DirSnapshots(t.TempDir())
	follow := func(ctx context.Context) (*bloomgate.Gate, chan error) {
		g, err := bloomgate.New(bloomgate.Config{FPRate: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		// SnapshotInterval longer than the test: only a quiet stream's
		// snapshot can confirm the last position.
		go func() {
			done <- g.Follow(ctx, fx.feed(t), bloomgate.FollowConfig{Snapshots: snaps, SnapshotInterval: 8 * time.Second})
		}()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := g.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		return g, done
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, done := follow(ctx)
	fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'k'||g||'@example.com' FROM generate_series(1, 100) g")
	final := fx.walEnd(t)
	testsvc.Eventually(t, time.Minute, func() bool { return g.Position() >= final }, "the gate did not apply %v", final)
	fx.pool.Close() // a client session would hold the shutdown up too
	pg.Stop(t)
	cancel()
	<-done
	g.Close()

	pg.Start(t)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	g2, done2 := follow(ctx2)
	defer func() {
		cancel2()
		if err := <-done2; !errors.Is(err, context.Canceled) {
			t.Errorf("Follow: %v", err)
		}
		g2.Close()
	}()
	for i := 1; i <= 100; i++ {
		if k := "k" + strconv.Itoa(i) + "@example.com"; !g2.MayContainString(k) {
			t.Fatalf("%s absent after the restart", k)
		}
	}
	if st := g2.Stats(); st.Builds != 0 {
		t.Logf("restarted with %d builds (a bootstrap instead of the snapshot)", st.Builds)
	}
}
