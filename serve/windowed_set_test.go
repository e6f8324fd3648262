package serve_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// failingSource fails every scan.
type failingSource struct{}

func (failingSource) ScanExpiring(context.Context, func([]byte, time.Time) error) error {
	return errors.New("database down")
}

// TestExpiringSetSQLite: a table-backed expiring set over an SQLite
// revocations table is built from the rows still live, sees rows inserted
// behind its back at the next rescan, takes BG.XADD, drops rows as they
// expire, refuses deletes, and is rebuilt from the table after a restart.
func TestExpiringSetSQLite(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	dir := t.TempDir()
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE revocations (jti TEXT, expires_at INTEGER)"); err != nil {
		t.Fatal(err)
	}
	now := c.Now()
	var live, dead [][]byte
	for i := range 1000 {
		jti := fmt.Sprintf("live-%d", i)
		live = append(live, []byte(jti))
		db.ExecContext(ctx, "INSERT INTO revocations VALUES (?, ?)", jti, now.Add(time.Duration(i%60+1)*time.Minute).Unix())
	}
	for i := range 200 {
		jti := fmt.Sprintf("dead-%d", i)
		dead = append(dead, []byte(jti))
		db.ExecContext(ctx, "INSERT INTO revocations VALUES (?, ?)", jti, now.Add(-time.Duration(i+1)*time.Minute).Unix())
	}
	db.ExecContext(ctx, "INSERT INTO revocations VALUES (NULL, ?), ('no-expiry', NULL)", now.Add(time.Hour).Unix())
	cfg := serve.Config{Now: c.Now, DataDir: filepath.Join(dir, "data"), Sets: []serve.SetConfig{{Name: "revoked", Expiring: &serve.ExpiringConfig{
		Source:          sqlite.Expiring{DB: db, Table: "revocations", KeyColumn: "jti", ExpiresColumn: "expires_at"},
		Params:          serve.ExpiringParams{MaxTTL: 70 * time.Minute, Capacity: 3000},
		RefreshInterval: 20 * time.Millisecond,
	}}}}
	s, err := serve.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Ready() {
		if got, _ := expiringHeld(s.MayContain("revoked", [][]byte{[]byte("never-revoked")})); !got[0] {
			t.Fatal("an expiring set not scanned yet answered absent")
		}
	}
	testsvc.Eventually(t, 10*time.Second, s.Ready, "the set to be ready")
	checkSet := func(s *serve.Store, what string) {
		t.Helper()
		got, err := expiringHeld(s.MayContain("revoked", live))
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range got {
			if !ok {
				t.Fatalf("%s: live row %s reported absent", what, live[i])
			}
		}
		got, _ = expiringHeld(s.MayContain("revoked", dead))
		n := 0
		for _, ok := range got {
			if ok {
				n++
			}
		}
		if n > 5 {
			t.Errorf("%s: %d of %d expired rows present", what, n, len(dead))
		}
	}
	checkSet(s, "after the first scan")
	if st, ok := s.SetStatus("revoked"); !ok || !st.Ready || st.Expiring == nil || st.Expiring.Rows != 1000 {
		t.Errorf("SetStatus = %+v, %v; want ready with 1000 live rows", st, ok)
	}
	// A row written by a service that does not BG.XADD: seen at a rescan.
	db.ExecContext(ctx, "INSERT INTO revocations VALUES ('behind-its-back', ?)", now.Add(30*time.Minute).Unix())
	testsvc.Eventually(t, 10*time.Second, func() bool {
		got, _ := expiringHeld(s.MayContain("revoked", [][]byte{[]byte("behind-its-back")}))
		return got[0]
	}, "the rescan to see a new row")
	if _, err := s.AddUntil("revoked", [][]byte{[]byte("via-serve")}, now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Delete([]string{"revoked"}); !errors.Is(err, serve.ErrSetReadOnly) || n != 0 {
		t.Errorf("DEL of a table-backed expiring set = %d, %v", n, err)
	}
	if err := s.Reserve("revoked", serve.ExpiringParams{MaxTTL: time.Hour, Capacity: 10}); !errors.Is(err, serve.ErrExists) {
		t.Errorf("XReserve over the set: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart: rebuilt from the table (it is not in the snapshot).
	s, err = serve.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testsvc.Eventually(t, 10*time.Second, s.Ready, "the set to be ready after a restart")
	checkSet(s, "after a restart")
	if got, _ := expiringHeld(s.MayContain("revoked", [][]byte{[]byte("via-serve")})); got[0] {
		t.Log("via-serve present after the restart as a false positive") // it had no row
	}

	// Every row expires; the set empties with no delete.
	c.Advance(71*time.Minute + 10*time.Minute + time.Second)
	info, err := s.Info("revoked")
	if err != nil || info.Kind != serve.KindExpiring {
		t.Fatal(info.Kind, err)
	}
	if info.Expiring.Generations != 0 {
		t.Errorf("after every row expired: %d generations held", info.Expiring.Generations)
	}
}

// TestExpiringSetSourceDown: a set whose table cannot be read is not ready
// and answers present to every lookup.
func TestExpiringSetSourceDown(t *testing.T) {
	s, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{Name: "revoked", Expiring: &serve.ExpiringConfig{
		Source: failingSource{}, Params: serve.ExpiringParams{MaxTTL: time.Hour, Capacity: 100},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(50 * time.Millisecond)
	if s.Ready() {
		t.Error("ready with a table that cannot be read")
	}
	if got, _ := expiringHeld(s.MayContain("revoked", [][]byte{[]byte("anything")})); !got[0] {
		t.Error("a set that was never scanned answered absent")
	}
	if _, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{Name: "x", Expiring: &serve.ExpiringConfig{Source: failingSource{}}}}}); err == nil {
		t.Error("an expiring set without a max TTL was accepted")
	}
}

// rowsSource serves fixed rows, in order.
type rowsSource []struct {
	key string
	exp time.Time
}

func (r rowsSource) ScanExpiring(_ context.Context, fn func([]byte, time.Time) error) error {
	for _, row := range r {
		if err := fn([]byte(row.key), row.exp); err != nil {
			return err
		}
	}
	return nil
}

// TestExpiringSetBeyondMaxTTL: a row expiring further ahead than the
// generations can hold makes the set answer present to every lookup until
// that expiry, rather than lose the row.
func TestExpiringSetBeyondMaxTTL(t *testing.T) {
	c := &clock{}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c.ns.Store(t0.UnixNano())
	// Windows of 3 h, two generations: "soon" takes the one ending 03:00,
	// "later" the one ending 06:00, and "far" (09:00) finds none.
	rows := rowsSource{{"soon", t0.Add(time.Hour)}, {"later", t0.Add(4 * time.Hour)}, {"far", t0.Add(8 * time.Hour)}}
	s, err := serve.Open(serve.Config{Now: c.Now, Sets: []serve.SetConfig{{Name: "r", Expiring: &serve.ExpiringConfig{
		Source: rows, Params: serve.ExpiringParams{MaxTTL: 3 * time.Hour, Capacity: 100, Generations: 2},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testsvc.Eventually(t, 10*time.Second, s.Ready, "ready")
	if got, _ := expiringHeld(s.MayContain("r", [][]byte{[]byte("far"), []byte("not-a-row")})); !got[0] || !got[1] {
		t.Fatalf("with a row the filter cannot hold: %v, want every lookup present", got)
	}
	c.Advance(8*time.Hour + time.Second)
	if got, _ := expiringHeld(s.MayContain("r", [][]byte{[]byte("not-a-row")})); got[0] {
		t.Error("still answering present after the far row's expiry")
	}
}

// TestExpiringSetBeyondMaxTTLHeld: a row expiring further ahead than the
// max TTL, while a generation is free for it, is held (present until its
// expiry) and the set stays exact: other keys answer absent.
func TestExpiringSetBeyondMaxTTLHeld(t *testing.T) {
	c := &clock{}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c.ns.Store(t0.UnixNano())
	// Windows of 30 s (max TTL 30 s, two generations): "far" expires in 90 s.
	rows := rowsSource{{"far", t0.Add(90 * time.Second)}}
	s, err := serve.Open(serve.Config{Now: c.Now, Sets: []serve.SetConfig{{Name: "r", Expiring: &serve.ExpiringConfig{
		Source: rows, Params: serve.ExpiringParams{MaxTTL: 30 * time.Second, Capacity: 100, Generations: 2},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testsvc.Eventually(t, 10*time.Second, s.Ready, "ready")
	for _, at := range []time.Duration{0, 60 * time.Second, 89 * time.Second} {
		c.ns.Store(t0.Add(at).UnixNano())
		if got, _ := expiringHeld(s.MayContain("r", [][]byte{[]byte("far"), []byte("not-a-row")})); !got[0] || got[1] {
			t.Fatalf("at +%v: far %v, not-a-row %v; want the far row present and the set exact", at, got[0], got[1])
		}
	}
}
