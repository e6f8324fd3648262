package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/serve/durable"
)

// Config configures Open. The zero value of every field means its default.
type Config struct {
	// DataDir holds the snapshot and the log. Default: "" — nothing is
	// stored, standalone filters live in memory only.
	DataDir string
	// Fsync is the log's fsync policy. Default: FsyncEverySec.
	Fsync Fsync
	// SnapshotInterval is how often a snapshot is written when the keyspace
	// changed since the last one. Default: 5 minutes. A snapshot is also
	// written when the log has grown by SnapshotLogBytes, and on Close.
	SnapshotInterval time.Duration
	// SnapshotLogBytes writes a snapshot once the log holds this many bytes.
	// Default: 64 MiB.
	SnapshotLogBytes int64
	// MaxMemory bounds the bytes held by all standalone filters. While they
	// hold more, write commands fail with ErrOOM (reads still work); a create
	// that would exceed it fails too. A filter that grows a sub-filter may
	// overshoot the bound by that sub-filter. Default: 0, no bound.
	MaxMemory int64
	// MaxFilterBytes bounds the size of one filter restored with LOADCHUNK
	// or read from the snapshot or log. Default: 16 GiB.
	MaxFilterBytes int64
	// Sets declares the table-backed sets, expiring ones (with
	// SetConfig.Expiring) included.
	Sets []SetConfig
	// Logger receives warnings (a truncated log tail) and events.
	// Default: discard.
	Logger *slog.Logger
	// BloomDefaults are the parameters of Bloom keys auto-created by BF.ADD,
	// BF.MADD and BF.INSERT. Default: RedisBloom's: error rate 0.01,
	// capacity 100, expansion 2.
	BloomDefaults BloomParams
	// CuckooDefaults are the parameters of cuckoo keys auto-created by CF.ADD
	// and CF.INSERT. Default: RedisBloom's: capacity 1024, bucket size 2,
	// 20 max iterations, expansion 1.
	CuckooDefaults CuckooParams
	// Now is the clock expiring keys (BG.X*) read: an item is remembered
	// until its expiry by this clock, and generations are dropped by it.
	// Default: time.Now. Tests inject a fake one.
	Now func() time.Time
	// Positions is the notation of the sets' change-feed positions: how
	// clients write a read-your-writes position (ParsePosition, which also
	// takes a decimal integer) and how reports show one (FormatPosition).
	// It is the source's (source/postgres.LSN for PostgreSQL's LSNs).
	// Default: changefeed.Decimal.
	Positions changefeed.Notation

	fs durable.FS // creates log segments; nil: the operating system's files
}

const (
	defaultSnapshotInterval = 5 * time.Minute
	defaultSnapshotLogBytes = 64 << 20
	defaultMaxFilterBytes   = 16 << 30
)

// Store is the keyspace. It is safe for concurrent use.
type Store struct {
	cfg  Config
	log  *slog.Logger
	aof  *durable.Log // nil without DataDir; holds the DataDir lock until Close
	sets map[string]*Set
	// badPosition is ParsePosition's error, naming Config.Positions.
	badPosition *Error

	mu    sync.RWMutex
	keys  map[string]*object
	loads map[string]*pendingLoad

	used    atomic.Int64 // bytes held by standalone filters and pending loads
	snapLSN uint64       // during recover: records below it are in the snapshot
	dirty   atomic.Uint64
	closed  atomic.Bool
	snapMu  sync.Mutex // one snapshot at a time
	stop    chan struct{}
	bgDone  sync.WaitGroup
	closeMu sync.Mutex
	runCtx  context.Context
	cancel  context.CancelFunc
}

// Open locks cfg.DataDir (ErrDataDirLocked if another Store holds it), loads
// the newest snapshot and replays the log from it, declares the
// table-backed sets and starts their gates and the background snapshots.
// A damaged snapshot is passed over for the one before it (the log since that
// one is kept, so nothing is lost); when there is nothing to fall back on,
// Open stops with an error wrapping ErrCorruptSnapshot. A record cut short at
// the very end of the log (a crash while it was written) is truncated with a
// logged warning; any other damage to the log stops Open with a
// *LogDamageError (wrapping ErrLogDamaged) naming the file and offset.
func Open(cfg Config) (*Store, error) {
	if err := fillDefaults(&cfg); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:   cfg,
		log:   cfg.Logger,
		keys:  map[string]*object{},
		loads: map[string]*pendingLoad{},
		sets:  map[string]*Set{},
		stop:  make(chan struct{}),
	}
	s.badPosition = ErrBadPosition
	if cfg.Positions != changefeed.Decimal {
		s.badPosition = badPosition(cfg.Positions)
	}
	s.runCtx, s.cancel = context.WithCancel(context.Background())
	if cfg.DataDir != "" {
		s.snapLSN = 1
		aof, err := durable.Open(cfg.DataDir, logOptions(&cfg), replayer{s})
		if err != nil {
			return nil, err
		}
		s.aof = aof
	}
	if err := s.openSets(); err != nil {
		s.cancel()
		s.closeSets()
		if s.aof != nil {
			s.aof.Close()
		}
		return nil, err
	}
	if s.aof != nil {
		s.bgDone.Add(1)
		go s.background()
	}
	s.startExpiry()
	return s, nil
}

func fillDefaults(cfg *Config) error {
	if cfg.Fsync == "" {
		cfg.Fsync = FsyncEverySec
	}
	if err := cfg.Fsync.Check(); err != nil {
		return err
	}
	if cfg.Positions == nil {
		cfg.Positions = changefeed.Decimal
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = defaultSnapshotInterval
	}
	if cfg.SnapshotLogBytes == 0 {
		cfg.SnapshotLogBytes = defaultSnapshotLogBytes
	}
	if cfg.MaxFilterBytes == 0 {
		cfg.MaxFilterBytes = defaultMaxFilterBytes
	}
	if cfg.MaxMemory < 0 || cfg.SnapshotInterval < 0 || cfg.SnapshotLogBytes < 0 || cfg.MaxFilterBytes < 0 {
		return errors.New("serve: negative limit in config")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.BloomDefaults = cfg.BloomDefaults.withDefaults()
	cfg.CuckooDefaults = cfg.CuckooDefaults.withDefaults()
	return nil
}

// background writes snapshots and, under FsyncEverySec, fsyncs the log.
func (s *Store) background() {
	defer s.bgDone.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if err := s.aof.Tick(); err != nil {
			s.log.Error("fsync of the log failed", "err", err)
		}
		due := s.dirty.Load() > 0 && time.Since(last) >= s.cfg.SnapshotInterval
		// After a failed fsync only a snapshot makes writes possible again.
		failed := s.aof.Failure() != nil
		if due || failed || s.aof.SizeSinceSnapshot() >= s.cfg.SnapshotLogBytes {
			if err := s.Snapshot(); err != nil {
				s.log.Error("snapshot failed", "err", err)
			}
			last = time.Now()
		}
	}
}

// Close writes a final snapshot (with DataDir), stops the gates and closes
// the log. Further writes fail with ErrClosed. Close is idempotent.
//
// A final snapshot that fails (a full disk) is logged, not returned: the log
// holds every acknowledged write and is replayed at the next start. Close
// returns an error only when the log itself cannot be synced and closed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	var err error
	if s.aof != nil {
		if serr := s.Snapshot(); serr != nil {
			s.log.Error("final snapshot failed; the log holds every acknowledged write and is replayed at the next start", "err", serr)
		}
	}
	s.closed.Store(true)
	close(s.stop)
	s.cancel()
	s.bgDone.Wait()
	if s.aof != nil {
		// Writers that passed the closed check before it was set finish
		// their record; then the file is synced and closed, and the
		// DataDir released.
		if cerr := s.aof.Close(); err == nil {
			err = cerr
		}
	}
	s.closeSets()
	return err
}

func (s *Store) closeSets() {
	for _, set := range s.sets {
		set.close()
	}
}

// UsedMemory returns the bytes held by standalone filters (and restores in
// progress).
func (s *Store) UsedMemory() int64 { return s.used.Load() }

// Durable reports whether standalone filters are stored (Config.DataDir set).
func (s *Store) Durable() bool { return s.cfg.DataDir != "" }

// FsyncPolicy returns the log's fsync policy.
func (s *Store) FsyncPolicy() Fsync { return s.cfg.Fsync }

// MaxMemory returns Config.MaxMemory.
func (s *Store) MaxMemory() int64 { return s.cfg.MaxMemory }

// checkWrite returns ErrClosed or ErrOOM when a write must be refused.
func (s *Store) checkWrite() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if s.cfg.MaxMemory > 0 && s.used.Load() > s.cfg.MaxMemory {
		return ErrOOM
	}
	return nil
}

// reserve accounts n more bytes, failing with ErrOOM when that exceeds
// MaxMemory.
func (s *Store) reserve(n int64) error {
	if s.cfg.MaxMemory > 0 && s.used.Load()+n > s.cfg.MaxMemory {
		return ErrOOM
	}
	s.used.Add(n)
	return nil
}

// lookup returns the object named name and the key's kind.
func (s *Store) lookup(name string) (*object, Kind) {
	if set := s.sets[name]; set != nil {
		return nil, KindSet
	}
	s.mu.RLock()
	o := s.keys[name]
	s.mu.RUnlock()
	if o == nil {
		return nil, KindNone
	}
	return o, o.kind()
}

// Type returns the kind of the key name (KindNone when it does not exist).
func (s *Store) Type(name string) Kind {
	_, k := s.lookup(name)
	return k
}

// Existing counts the names that exist (a name given twice counts twice).
func (s *Store) Existing(names []string) int {
	n := 0
	for _, name := range names {
		if s.Type(name) != KindNone {
			n++
		}
	}
	return n
}

// Delete deletes the standalone filters named and returns how many existed.
// A table-backed set cannot be deleted: ErrSetReadOnly.
func (s *Store) Delete(names []string) (int, error) {
	for _, name := range names {
		if s.sets[name] != nil || s.expiringSet(name) != nil {
			return 0, ErrSetReadOnly
		}
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n := 0
	for _, name := range names {
		ok, err := s.del(name)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func (s *Store) del(name string) (bool, error) {
	s.mu.Lock()
	if pl := s.loads[name]; pl != nil {
		delete(s.loads, name)
		s.used.Add(-pl.reserved)
	}
	o := s.keys[name]
	if o == nil {
		s.mu.Unlock()
		return false, nil
	}
	o.mu.Lock()
	pos, err := s.logRecord(&record{op: opDel, name: name})
	if err == nil {
		delete(s.keys, name)
		o.dead = true
		s.used.Add(-o.bytes)
	}
	o.mu.Unlock()
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	return true, s.waitDurable(pos)
}

// Keys returns the names of every key, sorted.
func (s *Store) Keys() []string {
	s.mu.RLock()
	names := make([]string, 0, len(s.keys)+len(s.sets))
	for name := range s.keys {
		names = append(names, name)
	}
	s.mu.RUnlock()
	for name := range s.sets {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Len returns the number of keys.
func (s *Store) Len() int {
	s.mu.RLock()
	n := len(s.keys)
	s.mu.RUnlock()
	return n + len(s.sets)
}

// remeasure updates the accounted size of o after a write that may have
// grown it. Call with o.mu held.
func (s *Store) remeasure(o *object) {
	n := o.key.subFilters()
	if n == o.filters {
		return
	}
	o.filters = n
	b := o.key.sizeBytes()
	s.used.Add(b - o.bytes)
	o.bytes = b
}

// Sets returns the table-backed sets, sorted by name.
func (s *Store) Sets() []*Set {
	out := make([]*Set, 0, len(s.sets))
	for _, set := range s.sets {
		out = append(out, set)
	}
	slices.SortFunc(out, func(a, b *Set) int {
		if a.cfg.Name < b.cfg.Name {
			return -1
		}
		if a.cfg.Name > b.cfg.Name {
			return 1
		}
		return 0
	})
	return out
}

// Set returns the table-backed set named name, or nil.
func (s *Store) Set(name string) *Set { return s.sets[name] }

// Ready reports whether every table-backed set is ready (SetStatus.Ready).
func (s *Store) Ready() bool {
	for _, set := range s.sets {
		if !set.gate.Ready() {
			return false
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, o := range s.keys {
		if o.table() != nil && !s.expiringReady(o) {
			return false
		}
	}
	return true
}
