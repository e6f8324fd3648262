package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestFeedReceiveAllocs: the feed's receive path (receiving each replication
// message, decoding it, delivering and confirming each transaction)
// allocates almost nothing per replicated row, for rows committed one per
// transaction and a hundred per transaction. The counts are the whole
// process's over many rows (BenchmarkFeedReceive reports them): about 0.01
// per row, the chunks the keys and Changes are cut from and what the rest of
// the process allocates while the rows go by (timeouts of the status
// interval, pgxpool's health checks), which grows with the run's duration.
// The bound leaves room for a run ten times slower on a loaded machine; an
// allocation per message, or per single-row transaction, exceeds it.
func TestFeedReceiveAllocs(t *testing.T) {
	// Not parallel: runtime.MemStats counts every goroutine's allocations.
	r := startReceive(t)
	r.measure(t, 1000, 1) // warm: buffers and chunks at their size
	rows := 20000
	if raceEnabled {
		rows = 2000 // the race detector slows decoding about tenfold
	}
	for _, tc := range []struct {
		perTxn int
		max    float64
	}{
		{1, 0.25},
		{100, 0.25},
	} {
		c := r.measure(t, rows, tc.perTxn)
		t.Logf("transactions of %d rows: %.3f allocs/row, %.0f B/row, %.0f ns CPU/row, %d GCs", tc.perTxn, c.allocs, c.bytes, c.cpuNs, c.gcs)
		if raceEnabled {
			continue // the rows were delivered; the counts are the race detector's
		}
		if c.allocs > tc.max {
			t.Errorf("transactions of %d rows: %.3f allocations per row, want at most %.2f", tc.perTxn, c.allocs, tc.max)
		}
	}
}

// freezer relays TCP connections to a server and can stop relaying the
// server's bytes, like a walsender stopped with SIGSTOP: the connection
// stays open and silent.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, upstream string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go io.Copy(u, c)
			go p.relay(c, u)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

// relay copies the server's bytes to the client, holding them while frozen.
func (p *freezer) relay(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		for p.frozen.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

// TestFeedReplyTimeout: a streaming feed whose server answers keeps its
// connection (every status update asks for a reply, and a reply comes);
// once the server goes silent, the connection is dropped within Timeout of
// the first unanswered request, saying so, and Stream reconnects.
func TestFeedReplyTimeout(t *testing.T) {
	t.Parallel() // a fixture and a relay of its own
	fx := newFeedFixture(t, "")
	addr := strings.TrimPrefix(fx.cfg.ConnString, "postgres://postgres@")
	addr = addr[:strings.IndexByte(addr, '/')]
	p := newFreezer(t, addr)
	// Timeout also bounds the feed's queries, which a loaded machine
	// slows: 2 s, forty status updates.
	const timeout = 2 * time.Second
	fx.cfg.ConnString = strings.Replace(fx.cfg.ConnString, addr, p.ln.Addr().String(), 1)
	fx.cfg.StatusInterval, fx.cfg.Timeout = 50*time.Millisecond, timeout
	f := fx.feed(t)
	ctx := context.Background()
	c := newConsumer()
	from, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	stop := c.stream(f, from)
	defer stop()
	testsvc.Eventually(t, waitLimit, func() bool { return !f.Health().CaughtUp.IsZero() }, "the feed never caught up")
	time.Sleep(2 * timeout) // answered: nothing may time out
	if h := f.Health(); !h.Connected || h.Reconnects != 0 || h.Err != nil {
		t.Fatalf("after %v of answered status updates: %+v", 2*timeout, h)
	}
	p.frozen.Store(true)
	frozen := time.Now()
	var got error
	testsvc.Eventually(t, waitLimit, func() bool { got = f.Err(); return got != nil }, "the feed never noticed the silent server")
	took := time.Since(frozen)
	p.frozen.Store(false)
	if !errors.Is(got, changefeed.ErrTimeout) || !strings.Contains(got.Error(), "no reply") {
		t.Fatalf("after %v of silence: %v, want the timeout of a status update without a reply", took, got)
	}
	if slack := 5 * time.Second; took > timeout+slack {
		t.Errorf("the silence was noticed after %v, want within %v of Timeout %v", took, slack, timeout)
	}
	// Answered again: Stream reconnects and delivers.
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('after@x')")
	c.waitFor(t, fx.walEnd(t))
}

// TestFeedConfirmAndCancelWake: with a status interval far beyond the test,
// a Confirm from another goroutine and one from inside apply both reach the
// server at once, and cancelling Stream's context ends it at once: neither
// waits for the next status update. The cluster is the test's own, without
// the keepalives of wal_sender_timeout, so that nothing else wakes the
// loop: the server's next message comes with its next record of running
// transactions, 15 s after a write.
func TestFeedConfirmAndCancelWake(t *testing.T) {
	t.Parallel() // a cluster of its own
	fx := feedFixtureOn(t, testsvc.NewPostgres(t, testsvc.PGOptions{Settings: map[string]string{"wal_sender_timeout": "0"}}).DSN, "")
	fx.cfg.StatusInterval = time.Hour
	f := fx.feed(t)
	ctx := context.Background()
	c := newConsumer()
	from, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	var inApply atomic.Bool
	c.onTxn = func(tx changefeed.Txn) {
		if inApply.Load() && len(tx.Changes) > 0 {
			if err := f.Confirm(ctx, tx.End); err != nil {
				t.Error(err)
			}
		}
	}
	stop := c.stream(f, from)
	confirmed := func(p changefeed.Position, how string) {
		t.Helper()
		// Without a wake-up the loop would wait for the next status
		// update, an hour.
		testsvc.Eventually(t, 5*time.Second, func() bool { // a loaded machine; milliseconds here
			st, err := f.SlotStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.ConfirmedFlush == p
		}, "%s: the slot never confirmed %s", how, p)
	}
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('a@x')")
	end := fx.walEnd(t)
	c.waitFor(t, end)
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	time.Sleep(100 * time.Millisecond) // the loop waits in its receive
	if err := f.Confirm(ctx, last); err != nil {
		t.Fatal(err)
	}
	confirmed(last, "Confirm from another goroutine")

	inApply.Store(true)
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('b@x')")
	c.waitFor(t, fx.walEnd(t))
	c.mu.Lock()
	var withKey changefeed.Position
	for _, tx := range c.txns {
		if len(tx.Changes) > 0 {
			withKey = tx.End
		}
	}
	c.mu.Unlock()
	confirmed(withKey, "Confirm inside apply")

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // a loaded machine; without the wake-up, an hour
		t.Fatal("Stream still running 5 s after its context ended")
	}
}
