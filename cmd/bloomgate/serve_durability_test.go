package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// mountTmpfs mounts a tmpfs of the given size (as mount's size= option) on a
// new temporary directory. Mounting needs root; where it is not allowed the
// test skips, or fails in CI (testsvc.Unavailable).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testsvc.Unavailable(t, "cannot mount a %s tmpfs (needs root): %v %s", size, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// freeDisk gives n bytes of path back to the file system.
func freeDisk(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, max(0, fi.Size()-n)); err != nil {
		t.Fatal(err)
	}
}

// ackLog records what the server acknowledged, by command.
type ackLog struct {
	bf, cf  []string // items added by BF.ADD to "bf", CF.ADD to "cf"
	reserve []string // keys created by BF.RESERVE
}

// writeOne sends the i-th write of a mix of BF.ADD, CF.ADD and BF.RESERVE
// and records it when acknowledged.
func (a *ackLog) writeOne(ctx context.Context, rdb *redis.Client, tag string, i int) error {
	item := fmt.Sprintf("%s-%d", tag, i)
	var err error
	switch i % 3 {
	case 0:
		if err = rdb.BFAdd(ctx, "bf", item).Err(); err == nil {
			a.bf = append(a.bf, item)
		}
	case 1:
		if err = rdb.CFAdd(ctx, "cf", item).Err(); err == nil {
			a.cf = append(a.cf, item)
		}
	default:
		if err = rdb.BFReserve(ctx, "r-"+item, 0.01, 10).Err(); err == nil {
			a.reserve = append(a.reserve, "r-"+item)
		}
	}
	return err
}

// writeUntilFull writes until a write is refused for want of space.
func (a *ackLog) writeUntilFull(t *testing.T, ctx context.Context, rdb *redis.Client, tag string) {
	t.Helper()
	for i := range 200000 {
		if err := a.writeOne(ctx, rdb, tag, i); err != nil {
			if !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("write %d: %v", i, err)
			}
			return
		}
	}
	t.Fatal("the disk never filled up")
}

// check verifies every acknowledged write.
func (a *ackLog) check(t *testing.T, ctx context.Context, rdb *redis.Client) {
	t.Helper()
	lost := 0
	for _, c := range []struct {
		cmd, key string
		items    []string
	}{{"BF.MEXISTS", "bf", a.bf}, {"CF.MEXISTS", "cf", a.cf}} {
		for start := 0; start < len(c.items); start += 500 {
			batch := c.items[start:min(start+500, len(c.items))]
			args := []any{c.cmd, c.key}
			for _, it := range batch {
				args = append(args, it)
			}
			res, err := rdb.Do(ctx, args...).BoolSlice()
			if err != nil {
				t.Fatal(err)
			}
			for i, ok := range res {
				if !ok {
					if lost++; lost < 5 {
						t.Errorf("%s lost acknowledged item %s", c.key, batch[i])
					}
				}
			}
		}
	}
	for _, k := range a.reserve {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
			if lost++; lost < 5 {
				t.Errorf("acknowledged BF.RESERVE %s lost (%d, %v)", k, n, err)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(a.bf)+len(a.cf)+len(a.reserve))
	}
}

// counts returns BF.CARD bf, CF.INFO cf's items and DBSIZE: exact counts a
// refused write must not change.
func counts(t *testing.T, ctx context.Context, rdb *redis.Client) [3]int64 {
	t.Helper()
	card, err := rdb.BFCard(ctx, "bf").Result()
	if err != nil {
		t.Fatal(err)
	}
	info, err := rdb.CFInfo(ctx, "cf").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return [3]int64{card, info.NumItemsInserted, n}
}

// TestServeFullDisk runs the server with its data directory on a 2 MiB
// tmpfs. While the disk is full every write is refused with an error and
// changes nothing (exact counts stay put, a retry is refused again rather
// than answered "already there"); when space comes back writes resume
// without a restart; SIGTERM on the full disk exits 0 with the log intact;
// and after a restart, and after a kill -9, every acknowledged write is
// there.
func TestServeFullDisk(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	mnt := mountTmpfs(t, "2m")
	data, ballast := filepath.Join(mnt, "data"), filepath.Join(mnt, "ballast")
	addr := freeAddr(t)
	args := []string{"-resp", addr, "-http", "", "-data", data, "-appendfsync", "always"}
	srv := startServe(t, bin, args...)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	var acked ackLog
	for i := range 300 {
		if err := acked.writeOne(ctx, rdb, "before", i); err != nil {
			t.Fatalf("write %d before the disk is full: %v", i, err)
		}
	}

	// A full disk (the log's last page may still take a few records): every
	// write is refused, and changes nothing.
	fillDisk(t, ballast)
	acked.writeUntilFull(t, ctx, rdb, "last-page")
	before := counts(t, ctx, rdb)
	for i := range 30 {
		err := acked.writeOne(ctx, rdb, "refused", i%3) // the same three, retried
		if err == nil || !strings.Contains(err.Error(), "MISCONF") || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("write %d on a full disk: %v, want a MISCONF … no space left on device error", i, err)
		}
	}
	if after := counts(t, ctx, rdb); after != before {
		t.Fatalf("refused writes changed the keyspace: counts %v → %v", before, after)
	}

	// Space comes back: writes resume, until the disk is full again.
	freeDisk(t, ballast, 128<<10)
	for i := range 3 {
		if err := acked.writeOne(ctx, rdb, "refused", i); err != nil {
			t.Fatalf("retry of a refused write once there is room: %v", err)
		}
	}
	if added, err := rdb.BFAdd(ctx, "bf", "refused-0").Result(); err != nil || added {
		t.Fatalf("BF.ADD of an item just added: %v, %v", added, err)
	}
	acked.writeUntilFull(t, ctx, rdb, "refill")

	// SIGTERM on the full disk: the final snapshot cannot be written, the
	// log is intact, the exit is clean.
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.wait(); err != nil {
		t.Fatalf("exit after SIGTERM on a full disk: %v; stderr:\n%s", err, srv.stderr)
	}
	if !strings.Contains(srv.stderr.String(), "final snapshot failed") {
		t.Errorf("no word of the failed final snapshot; stderr:\n%s", srv.stderr)
	}

	// A restart on the still full disk replays the log.
	srv = startServe(t, bin, args...)
	acked.check(t, ctx, rdb)

	// Room again, more writes, kill -9, restart: nothing acknowledged lost.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := acked.writeOne(ctx, rdb, "after", i); err != nil {
			t.Fatalf("write %d after the restart: %v", i, err)
		}
	}
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.wait()
	startServe(t, bin, args...)
	acked.check(t, ctx, rdb)
	t.Logf("%d BF.ADD, %d CF.ADD, %d BF.RESERVE acknowledged and checked", len(acked.bf), len(acked.cf), len(acked.reserve))
}

// addItems BF.ADDs n items named prefix-i to key, one command each.
func addItems(t *testing.T, ctx context.Context, rdb *redis.Client, key, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		item := fmt.Sprintf("%s-%d", prefix, i)
		if err := rdb.BFAdd(ctx, key, item).Err(); err != nil {
			t.Fatal(err)
		}
		out = append(out, item)
	}
	return out
}

// missing returns the items BF.MEXISTS key reports absent.
func missing(t *testing.T, ctx context.Context, rdb *redis.Client, key string, items []string) []string {
	t.Helper()
	args := []any{"BF.MEXISTS", key}
	for _, it := range items {
		args = append(args, it)
	}
	res, err := rdb.Do(ctx, args...).BoolSlice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, ok := range res {
		if !ok {
			out = append(out, items[i])
		}
	}
	return out
}

// TestServeLogDamage flips one byte in the middle of the log of a killed
// server. The start must stop naming the file, the offset and the check
// subcommand (not drop the rest of the log as a torn tail); `serve check`
// reports the damage and exits 1; `serve check -repair` keeps a copy and
// drops only the damaged record; the server then starts with every other
// acknowledged write.
func TestServeLogDamage(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	// -appendfsync no: a write reaches the log file (write(2)) before it
	// is acknowledged under every policy, and the kill is the process's,
	// not the machine's, so the log read back is the same; an fsync for
	// each of 2000 writes was most of the test's time on this disk.
	args := []string{"-resp", addr, "-http", "", "-data", dir, "-appendfsync", "no"}
	srv := startServe(t, bin, args...)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	acked := addItems(t, ctx, rdb, "bf", "item", 2000)
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.wait()

	segs, _ := filepath.Glob(filepath.Join(dir, "log-*.aof"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(segs[0], data, 0o644); err != nil {
		t.Fatal(err)
	}

	// A server that starts would run until killed: 20 s is far more than a
	// refusal takes.
	startCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(startCtx, bin, append([]string{"serve"}, args...)...).CombinedOutput()
	if startCtx.Err() != nil {
		t.Fatalf("the server started on a damaged log; output:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "is damaged at offset") || !strings.Contains(string(out), "bloomgate serve check") {
		t.Fatalf("start on a damaged log: %v, want a refusal naming the offset and the check subcommand; output:\n%s", err, out)
	}

	out, err = exec.Command(bin, "serve", "check", "-data", dir).CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "DAMAGED") {
		t.Fatalf("serve check on the damaged log: %v, want exit 1 and DAMAGED; output:\n%s", err, out)
	}
	out, err = exec.Command(bin, "serve", "check", "-data", dir, "-repair").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "repaired") {
		t.Fatalf("serve check -repair: %v; output:\n%s", err, out)
	}
	copies, _ := filepath.Glob(filepath.Join(dir, "repair-*", filepath.Base(segs[0])))
	if len(copies) != 1 {
		t.Fatalf("no copy of the damaged segment after the repair; output:\n%s", out)
	}

	startServe(t, bin, args...)
	if lost := missing(t, ctx, rdb, "bf", acked); len(lost) > 1 {
		t.Fatalf("%d of %d acknowledged adds lost after the repair (at most the damaged record's one may be): %v", len(lost), len(acked), lost[:min(5, len(lost))])
	}
}

// TestServeCorruptSnapshot damages the newest snapshot of a stopped server:
// the start falls back to the previous snapshot and the log, and every
// acknowledged write is there.
func TestServeCorruptSnapshot(t *testing.T) {
	t.Parallel() // a server and data directory of its own
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"-resp", addr, "-http", "", "-data", dir}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	var acked []string
	for round := range 3 { // each SIGTERM writes a snapshot
		srv := startServe(t, bin, args...)
		acked = append(acked, addItems(t, ctx, rdb, "bf", fmt.Sprint("round", round), 300)...)
		srv.cmd.Process.Signal(syscall.SIGTERM)
		if err := srv.wait(); err != nil {
			t.Fatalf("SIGTERM: %v\n%s", err, srv.stderr)
		}
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snapshot*.bgs")) // sorted: the newest is last
	if len(snaps) == 0 {
		t.Fatal("no snapshot")
	}
	newest := snaps[len(snaps)-1]
	data, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(newest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, bin, args...)
	if lost := missing(t, ctx, rdb, "bf", acked); len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged adds lost: %v", len(lost), len(acked), lost[:min(5, len(lost))])
	}
	if !strings.Contains(srv.stderr.String(), "snapshot is damaged") {
		t.Errorf("no word of the damaged snapshot; stderr:\n%s", srv.stderr)
	}
}

// fullDiskState is what a server answers for a set of items: BF.EXISTS bf,
// CF.EXISTS cf and CF.COUNT cf of each, BF.CARD bf and CF.INFO cf.
type fullDiskState struct {
	bf, cf []bool
	count  []int64
	card   int64
	info   redis.CFInfo
}

func readFullDiskState(t *testing.T, ctx context.Context, rdb *redis.Client, items []string) fullDiskState {
	t.Helper()
	var s fullDiskState
	for start := 0; start < len(items); start += 500 {
		batch := items[start:min(start+500, len(items))]
		bfArgs, cfArgs := []any{"BF.MEXISTS", "bf"}, []any{"CF.MEXISTS", "cf"}
		for _, it := range batch {
			bfArgs, cfArgs = append(bfArgs, it), append(cfArgs, it)
		}
		bf, err := rdb.Do(ctx, bfArgs...).BoolSlice()
		if err != nil {
			t.Fatal(err)
		}
		cf, err := rdb.Do(ctx, cfArgs...).BoolSlice()
		if err != nil {
			t.Fatal(err)
		}
		s.bf, s.cf = append(s.bf, bf...), append(s.cf, cf...)
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(batch))
		for i, it := range batch {
			cmds[i] = pipe.CFCount(ctx, "cf", it)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			s.count = append(s.count, c.Val())
		}
	}
	var err error
	if s.card, err = rdb.BFCard(ctx, "bf").Result(); err != nil {
		t.Fatal(err)
	}
	if s.info, err = rdb.CFInfo(ctx, "cf").Result(); err != nil {
		t.Fatal(err)
	}
	return s
}

// fullDiskWriter is one connection's record of its writes.
type fullDiskWriter struct {
	bf      []string // acknowledged BF.ADDs
	dels    []string // CF.DELs answered 1
	acked   int
	refused int
}

// writeUntilRefused sends random BF.ADD, CF.ADD and CF.DEL of items from a
// pool every writer shares (so an item is added more than once, deleted by
// another connection, and a refused write is often retried) until n writes
// were refused for want of space.
func (w *fullDiskWriter) writeUntilRefused(ctx context.Context, rdb *redis.Client, rng *rand.Rand, pool, n int) error {
	for i := 0; w.refused < n; i++ {
		if i > 400000 {
			return errors.New("the disk never filled up")
		}
		item := fmt.Sprintf("k-%d", rng.IntN(pool))
		var err error
		switch rng.IntN(3) {
		case 0:
			if err = rdb.BFAdd(ctx, "bf", item).Err(); err == nil {
				w.bf = append(w.bf, item)
			}
		case 1:
			err = rdb.CFAdd(ctx, "cf", item).Err()
		default:
			var ok bool
			if ok, err = rdb.CFDel(ctx, "cf", item).Result(); err == nil && ok {
				w.dels = append(w.dels, item)
			}
		}
		switch {
		case err == nil:
			w.acked++
		case strings.Contains(err.Error(), "no space left on device"):
			w.refused++
		default:
			return fmt.Errorf("write %d: %w", i, err)
		}
	}
	return nil
}

// TestServeFullDiskConcurrent runs the server with -appendfsync always on a
// 2 MiB tmpfs under 8 connections of BF.ADD, CF.ADD and CF.DEL until the
// disk is full, then kills it with SIGKILL and restarts it on the still full
// disk, three times, giving back some space between rounds; without
// snapshots and with one every second (then each round waits, before the
// kill, for a snapshot to fail on the full disk). A refused write
// changes nothing, so what the server answers before the kill is the
// acknowledged writes: after each restart every item must answer BF.EXISTS,
// CF.EXISTS and CF.COUNT as before the kill, BF.CARD and CF.INFO must count
// the same, every acknowledged BF.ADD must be there, and no CF.DEL answered 1
// may be undone.
func TestServeFullDiskConcurrent(t *testing.T) {
	t.Parallel()
	// Without snapshots, the log alone; with one every second, snapshots
	// attempted on the full disk, log segments started for them, and
	// restarts from a snapshot and the log after it.
	for _, snapshots := range []string{"5m", "1s"} {
		t.Run("snapshot-interval "+snapshots, func(t *testing.T) {
			t.Parallel() // a tmpfs and a server of its own
			fullDiskConcurrent(t, snapshots)
		})
	}
}

func fullDiskConcurrent(t *testing.T, snapshotInterval string) {
	bin := buildBinary(t)
	mnt := mountTmpfs(t, "2m")
	data, ballast := filepath.Join(mnt, "data"), filepath.Join(mnt, "ballast")
	// Half a MiB of room at first: some 20,000 writes fill it, the
	// cuckoo filter grows several times, and each round gives back more.
	// The checks below hold for any room; the writes to fill it are most
	// of the test's CPU (a 1.25 MiB room took 47,000).
	if err := os.WriteFile(ballast, make([]byte, 1536<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	conf := filepath.Join(t.TempDir(), "bloomgate.conf")
	if err := os.WriteFile(conf, []byte("snapshot-interval "+snapshotInterval+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-resp", addr, "-http", "", "-data", data, "-appendfsync", "always", "-config", conf}
	srv := startServe(t, bin, args...)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.CFReserve(ctx, "cf", 1024).Err(); err != nil {
		t.Fatal(err)
	}

	const writers, pool = 8, 20000
	items := make([]string, pool)
	for i := range items {
		items[i] = fmt.Sprintf("k-%d", i)
	}
	ws := make([]*fullDiskWriter, writers)
	for w := range ws {
		ws[w] = &fullDiskWriter{}
	}
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w, fw := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
				defer c.Close()
				rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
				if err := fw.writeUntilRefused(ctx, c, rng, pool, 100*(round+1)); err != nil {
					errs <- fmt.Errorf("round %d, writer %d: %w", round, w, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if snapshotInterval == "1s" {
			// A snapshot attempted on the full disk (one a second while
			// writes are unsnapshotted), whatever the fill's pace: the
			// restart then reads the log segments started for it.
			testsvc.Eventually(t, 30*time.Second, func() bool { return strings.Contains(srv.stderr.String(), "snapshot failed") },
				"round %d: no snapshot attempted on the full disk; stderr:\n%s", round, srv.stderr)
		}
		before := readFullDiskState(t, ctx, rdb, items)
		srv.cmd.Process.Signal(syscall.SIGKILL)
		srv.wait()
		srv = startServe(t, bin, args...)
		after := readFullDiskState(t, ctx, rdb, items)

		bad := 0
		report := func(format string, a ...any) {
			if bad++; bad <= 10 {
				t.Errorf("round %d: "+format, append([]any{round}, a...)...)
			}
		}
		var acked, refused, dels, stillPresent int
		for _, w := range ws {
			acked, refused, dels = acked+w.acked, refused+w.refused, dels+len(w.dels)
			for _, it := range w.bf {
				if i, _ := strconv.Atoi(strings.TrimPrefix(it, "k-")); !after.bf[i] {
					report("acknowledged BF.ADD %s lost", it)
				}
			}
			for _, it := range w.dels {
				i, _ := strconv.Atoi(strings.TrimPrefix(it, "k-"))
				if !before.cf[i] && after.cf[i] {
					report("acknowledged CF.DEL %s undone: absent before the kill, present after the restart", it)
				}
				if before.cf[i] {
					stillPresent++ // another copy, or another item's fingerprint
				}
			}
		}
		for i, it := range items {
			if before.bf[i] != after.bf[i] || before.cf[i] != after.cf[i] || before.count[i] != after.count[i] {
				report("%s: BF.EXISTS %v, CF.EXISTS %v, CF.COUNT %d before the kill; %v, %v, %d after the restart",
					it, before.bf[i], before.cf[i], before.count[i], after.bf[i], after.cf[i], after.count[i])
			}
		}
		if before.card != after.card {
			report("BF.CARD %d before the kill, %d after the restart", before.card, after.card)
		}
		if before.info != after.info {
			report("CF.INFO %+v before the kill, %+v after the restart", before.info, after.info)
		}
		t.Logf("round %d: %d writes acknowledged (%d CF.DEL answered 1, of whose items %d answer present before the kill as after: another copy or a fingerprint match), %d refused so far; CF.INFO %+v",
			round, acked, dels, stillPresent, refused, after.info)
		if bad > 0 {
			t.Fatalf("round %d: %d differences between the acknowledged writes and the restarted server", round, bad)
		}
		freeDisk(t, ballast, 256<<10)
	}
}
