// Package server assembles a bloomgate server from a Config, as
// `bloomgate serve` runs it: the keyspace (serve), its table-backed sets
// with their sources, change feeds and fan-out, and the Redis protocol,
// HTTP and PostgreSQL listeners. Start returns the running Server; Close
// stops it.
//
// A Config is built in code or read from the config file of `bloomgate
// serve` (ParseConfig; docs/serve.md). Sources (postgres, sqlite) and
// fan-out transports (jetstream, redis, memory) are registered by name in
// this package: each lives in a package of its own (source/…,
// fanout/…) and is registered here by one call in a file of its own, which
// also adapts its config (source_*.go, transport_*.go).
//
// Start binds its listeners first, but serves only once the sets'
// sources and servers are checked and the keyspace is recovered: a
// connection made meanwhile waits in the listen queue. (Answering before
// the sets are declared would answer "absent" for a set's name.)
package server
