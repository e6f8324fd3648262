// Package bloomgate keeps lookups of absent keys off the database.
//
// A Gate holds a probabilistic filter built from a table's keys. Lookups the
// filter proves absent return at once; only "maybe present" lookups reach the
// database. The gate never answers "absent" for a key the table has: whenever
// it cannot be sure (not warmed yet, a build failed, the filter refused a
// key), it fails open and every lookup goes to the database until it is sure
// again.
//
// What the caller does in return: call Gate.Add before a row's transaction
// commits and Gate.Remove once per deleted row after its delete commits, each
// within Config.RebuildOverlap of the commit. Rows written without Add (by
// another service, say) are not seen until the next build.
//
// The gate's filter is any Filter: a set of key hashes that never forgets.
// The filter families live in package filter; sources of keys in
// source/postgres (pgx) and source/sqlite (the embedded default).
//
// Gate.Follow keeps a gate in step with a change feed instead (every writer's
// rows, deletes included, and a warm restart from a snapshot); packages
// fanout/jetstream and fanout/redisstream share one feed among many instances.
//
// A Gate is safe for concurrent use: lookups never lock, and MayContain and
// MayContainMany do not allocate; Add, Remove and builds serialise on
// a mutex. The examples run on an in-memory source and an in-memory feed.
//
// The README has a quick start; docs/design.md describes the states, the
// journal, rebuilds, removes and the change feed; docs/operations.md the
// metrics and alerts.
package bloomgate
