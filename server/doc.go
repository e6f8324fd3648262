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
// Listen serves as soon as its listeners are bound and the keyspace is
// recovered, with every set declared and not ready (answering "maybe":
// a set's name must never be answered as a missing key); the sets'
// sources, change feeds and fan-out are connected and checked in the
// background, each set in parallel (see pending.go). Start is Listen and
// then waits for that.
package server
