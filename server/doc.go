// Package server assembles a bloomgate server from a Config, as
// `bloomgate serve` runs it: the keyspace (serve), its table-backed sets
// with their sources, change feeds and fan-out, and the Redis protocol,
// HTTP and PostgreSQL listeners. Start returns the running Server; Close
// stops it.
//
// A Config is built in code or read from the config file of `bloomgate
// serve` (ParseConfig; docs/serve.md). Sources (postgres, sqlite) and
// fan-out transports (jetstream, redis, memory) are registered by name in
// this package: each is a package of its own and one registration line
// here.
package server
