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
package bloomgate
