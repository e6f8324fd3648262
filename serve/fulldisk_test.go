package serve

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable/durabletest"
)

// writeOps runs one of each write command on keys named after round and
// returns the first error.
func writeOps(s *Store, round int) error {
	item := [][]byte{fmt.Appendf(nil, "item-%d", round)}
	if _, _, err := s.Add("bf", item, AddOptions{}); err != nil {
		return fmt.Errorf("Add: %w", err)
	}
	if _, _, err := s.Insert("cf", item, InsertOptions{}); err != nil {
		return fmt.Errorf("Insert: %w", err)
	}
	if _, _, err := s.Insert("cfnx", item, InsertOptions{IfAbsent: true}); err != nil {
		return fmt.Errorf("Insert IfAbsent: %w", err)
	}
	if err := s.Reserve(fmt.Sprint("res-bf-", round), BloomParams{Capacity: 10, ErrorRate: 0.01}); err != nil {
		return fmt.Errorf("Reserve bloom: %w", err)
	}
	if err := s.Reserve(fmt.Sprint("res-cf-", round), CuckooParams{Capacity: 10}); err != nil {
		return fmt.Errorf("Reserve cuckoo: %w", err)
	}
	return nil
}

// TestFullDisk: while the log cannot be written, every write command fails
// with ErrLogWrite and changes nothing in memory (a retry is not answered
// "already there"); a delete deletes nothing; once there is room again,
// writes succeed without a restart; after a crash every acknowledged write
// is there and none of the refused ones.
func TestFullDisk(t *testing.T) {
	for _, fsync := range []Fsync{FsyncAlways, FsyncEverySec} {
		t.Run(string(fsync), func(t *testing.T) {
			dir := t.TempDir()
			fs := &durabletest.FaultFS{}
			cfg := Config{DataDir: dir, Fsync: fsync, fs: fs}
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				if err := writeOps(s, round); err != nil {
					t.Fatal(err)
				}
			}
			fs.Full.Store(true)
			for range 2 { // the retry must fail the same way
				err := writeOps(s, 100)
				if !errors.Is(err, ErrLogWrite) || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("write on a full disk: %v, want ErrLogWrite wrapping ENOSPC", err)
				}
				if _, _, err := s.Insert("cfnx", [][]byte{[]byte("item-100")}, InsertOptions{IfAbsent: true}); !errors.Is(err, ErrLogWrite) {
					t.Fatalf("CF.ADDNX on a full disk: %v", err)
				}
				if n, err := s.Delete([]string{"res-bf-0"}); n != 0 || !errors.Is(err, ErrLogWrite) {
					t.Fatalf("Del on a full disk: %d, %v", n, err)
				}
				if ok, err := s.Remove("cf", []byte("item-0")); ok || !errors.Is(err, ErrLogWrite) {
					t.Fatalf("Remove on a full disk: %v, %v", ok, err)
				}
			}
			refusedAbsent := func(s *Store, when string) {
				t.Helper()
				item := [][]byte{[]byte("item-100")}
				if held(s.MayContain("bf", item))[0] || held(s.MayContain("cf", item))[0] {
					t.Errorf("%s: a refused add is in memory", when)
				}
				if s.Type("res-bf-100") != KindNone || s.Type("res-cf-100") != KindNone {
					t.Errorf("%s: a refused reserve created its key", when)
				}
			}
			refusedAbsent(s, "on the full disk")
			if s.Type("res-bf-0") != KindBloom || !held(s.MayContain("cf", [][]byte{[]byte("item-0")}))[0] {
				t.Error("a refused delete deleted")
			}
			if info, _ := s.cuckooInfo("cf"); info.Inserted != 3 || info.Deleted != 0 {
				t.Errorf("cuckooInfo after refused writes: %+v", info)
			}

			fs.Full.Store(false)
			for round := 3; round < 6; round++ {
				if err := writeOps(s, round); err != nil {
					t.Fatalf("write once there is room again: %v", err)
				}
			}
			if added, _, err := s.Add("bf", [][]byte{[]byte("item-100")}, AddOptions{}); err != nil || !added[0] {
				t.Fatalf("retry of a refused BF.ADD once there is room: %v, %v; want added", added, err)
			}
			crash(s)

			r := openStore(t, Config{DataDir: dir})
			for round := range 6 {
				item := [][]byte{fmt.Appendf(nil, "item-%d", round)}
				if !held(r.MayContain("bf", item))[0] || !held(r.MayContain("cf", item))[0] || !held(r.MayContain("cfnx", item))[0] {
					t.Errorf("acknowledged add of round %d lost", round)
				}
				if r.Type(fmt.Sprint("res-bf-", round)) != KindBloom || r.Type(fmt.Sprint("res-cf-", round)) != KindCuckoo {
					t.Errorf("acknowledged reserve of round %d lost", round)
				}
			}
			if !held(r.MayContain("bf", [][]byte{[]byte("item-100")}))[0] {
				t.Error("the acknowledged retry is lost")
			}
			if held(r.MayContain("cf", [][]byte{[]byte("item-100")}))[0] || r.Type("res-bf-100") != KindNone {
				t.Error("a refused write came back after the restart")
			}
			if info, _ := r.cuckooInfo("cf"); info.Inserted != 6 {
				t.Errorf("cuckooInfo after restart: %+v, want 6 inserted", info)
			}
		})
	}
}

// TestFsyncFailure: a write whose fsync fails has been applied, so it is
// never answered with an error (an error reply means nothing changed): its
// reply waits for the snapshot that recovers the log and acknowledges it,
// or, when none comes in time, the outcome is unknown (the protocols close
// the connection without a reply). Writes after the failure are refused
// and change nothing until a snapshot holds everything; after a crash
// every acknowledged write is there and no refused one.
func TestFsyncFailure(t *testing.T) {
	defer func(d time.Duration) { durableHold = d }(durableHold)
	durableHold = 300 * time.Millisecond
	dir := t.TempDir()
	fs := &durabletest.FaultFS{}
	s, err := Open(Config{DataDir: dir, Fsync: FsyncAlways, fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeOps(s, 0); err != nil {
		t.Fatal(err)
	}
	bfAdd := func(item string) error {
		_, _, err := s.Add("bf", [][]byte{[]byte(item)}, AddOptions{})
		return err
	}
	// The background snapshot (every second while the log is failed)
	// recovers, and the held write is acknowledged.
	durableHold = 10 * time.Second
	fs.SyncFails.Store(true)
	if err := bfAdd("held"); err != nil {
		t.Fatalf("a write whose fsync failed, then recovered by a snapshot: %v, want an acknowledgement", err)
	}
	fs.SyncFails.Store(false)
	if err := bfAdd("after"); err != nil {
		t.Fatalf("a write after the recovery: %v", err)
	}
	// No snapshot can recover (no new log segment): the outcome is unknown,
	// never ErrLogWrite alone; a later write is refused and changes nothing.
	durableHold = 300 * time.Millisecond
	fs.SyncFails.Store(true)
	fs.CreateFails.Store(true)
	if err := bfAdd("unknown"); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a write whose fsync failed, no snapshot possible: %v, want ErrOutcomeUnknown", err)
	}
	if _, _, err := s.Insert("cf", [][]byte{[]byte("refused")}, InsertOptions{}); !errors.Is(err, ErrLogWrite) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a write after a failed fsync, before a snapshot: %v, want ErrLogWrite", err)
	}
	if held(s.MayContain("cf", [][]byte{[]byte("refused")}))[0] {
		t.Fatal("a refused CF.ADD changed the filter")
	}
	fs.SyncFails.Store(false)
	fs.CreateFails.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for writeOps(s, 3) != nil {
		if time.Now().After(deadline) {
			t.Fatal("writes still refused 20 s after the disk recovered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	crash(s)
	r := openStore(t, Config{DataDir: dir})
	for _, round := range []int{0, 3} {
		item := [][]byte{fmt.Appendf(nil, "item-%d", round)}
		if !held(r.MayContain("bf", item))[0] || !held(r.MayContain("cf", item))[0] || r.Type(fmt.Sprint("res-cf-", round)) != KindCuckoo {
			t.Errorf("acknowledged writes of round %d lost", round)
		}
	}
	if !held(r.MayContain("bf", [][]byte{[]byte("held")}))[0] {
		t.Error("the acknowledged held write was lost")
	}
	if held(r.MayContain("cf", [][]byte{[]byte("refused")}))[0] {
		t.Error("a refused write is there after the restart")
	}
}
