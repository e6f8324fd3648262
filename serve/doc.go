// Package serve is the core of `bloomgate serve`: a keyspace of named
// filters that the Redis protocol (package serve/resp), the HTTP API
// (package serve/httpapi) and the PostgreSQL front end (package
// serve/pgwire) expose. It speaks none of them: its verbs take option
// structs (Reserve, Add, Insert, MayContain, Remove, Info, Dump…) and its
// errors carry a Code, which each front end spells its own way.
//
// The keyspace holds three kinds of key:
//
//   - Standalone filters, created by clients as with RedisBloom: a Bloom key
//     (BF.*) is a scalable Bloom filter (filter.Scalable), a cuckoo key (CF.*)
//     a cuckoo filter (filter.Cuckoo), an expiring key (BG.X*, KindExpiring)
//     a filter.Windowed whose items expire (see windowed.go). They are durable when Config.DataDir is
//     set: every write is appended to a log before it is acknowledged, with an
//     fsync policy like Redis' appendfsync (see Fsync), and snapshots of the
//     whole keyspace are written atomically, periodically and on Close, after
//     which the log is compacted. Open loads the snapshot and replays the log.
//     The log, snapshots, recovery and the check are package serve/durable's;
//     what the records and snapshot entries say is this package's (record.go).
//     Each kind is one type behind one interface (objects.go).
//   - Table-backed sets, declared in Config.Sets: a bloomgate.Gate each, built
//     from a table (PostgreSQL or SQLite) and kept fresh by the gate. Their
//     filters are rebuilt from the table at start, not stored on disk. A set
//     that is not ready answers "maybe" (true) for every key: it never gives a
//     false negative.
//   - Table-backed expiring sets, declared in Config.Sets with
//     SetConfig.Expiring: an expiring key built from a table's key and
//     expiry columns, following its change feed or rescanned periodically
//     (see windowed_set.go); not stored on disk either. Both kinds are
//     opened by one opener after recovery, reported by one status
//     (Store.SetStatus) and stopped together at Close.
//
// A Store is safe for concurrent use. Lock order: Store.snapMu, then
// Store.mu, then object.mu, then durable.Log's own (syncMu, then mu). Writes
// wait for an fsync (FsyncAlways) only after releasing Store.mu and
// object.mu.
//
// docs/serve.md is the server's manual: configuration, commands, HTTP routes,
// durability and the differences from RedisBloom.
package serve
