package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// mountTmpfs mounts a tmpfs of the given size (as mount's size= option) on a
// new temporary directory. Mounting needs root; where it is not allowed the
// test skips, except under BLOOMGATE_REQUIRE_SERVICES=1 (CI), where it fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("cannot mount a %s tmpfs (needs root): %v %s", size, err, strings.TrimSpace(string(out)))
		if os.Getenv("BLOOMGATE_REQUIRE_SERVICES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
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
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"-resp", addr, "-http", "", "-data", dir, "-appendfsync", "always"}
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
