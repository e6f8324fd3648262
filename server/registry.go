package server

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/serve"
)

// The registries: a source or a fan-out transport is a package of its own
// plus one registerSource or registerTransport line in this package (a file
// per driver: source_*.go, transport_*.go). Start and ParseConfig find
// them by their enum value and by their config-file name.

// SourceDriver names a registered source.
type SourceDriver int

const (
	// SourceNone: the set has no source (a fanned-out set's instance).
	SourceNone SourceDriver = iota
	// SourcePostgres: a PostgreSQL table (source/postgres), with a change
	// feed.
	SourcePostgres
	// SourceSQLite: an SQLite table (source/sqlite), rebuild-only.
	SourceSQLite
)

// String returns the driver's config-file name.
func (d SourceDriver) String() string {
	if s, ok := sources[d]; ok {
		return s.name
	}
	if d == SourceNone {
		return "none"
	}
	return fmt.Sprintf("SourceDriver(%d)", int(d))
}

// Transport names a registered fan-out transport.
type Transport int

const (
	// TransportNone: the set is not fanned out.
	TransportNone Transport = iota
	// TransportJetStream: NATS JetStream (fanout/jetstream).
	TransportJetStream
	// TransportRedis: a Redis stream (fanout/redisstream).
	TransportRedis
	// TransportMemory: a log in this process (fanout/memlog).
	TransportMemory
)

// String returns the transport's config-file name.
func (t Transport) String() string {
	if d, ok := transports[t]; ok {
		return d.name
	}
	if t == TransportNone {
		return "none"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// sourceDriver opens a set's source.
type sourceDriver struct {
	// name is the config-file key whose value is SourceConfig.DSN.
	name string
	// open connects the set's source within the set's connect timeout.
	open func(ctx context.Context, s *SetConfig, log *slog.Logger) (*openedSource, error)
	// positions is how the source writes its change-feed positions
	// (PostgreSQL's LSN); nil for a source without a feed.
	positions changefeed.Notation
}

// openedSource is a set's connected source. close runs at Close, and on a
// failed Start.
type openedSource struct {
	source   bloomgate.Source     // kinds bloom and cuckoo
	expiring serve.ExpiringSource // an expiring set (filter.FamilyWindowed)
	confirm  serve.Confirmer      // nil without SourceConfig.Confirm
	// feed opens the set's change feed; nil when the source has none.
	feed func(ctx context.Context) (bloomgate.Feed, func(), error)
	// expiringFeed opens an expiring set's change feed; nil when the
	// source has none.
	expiringFeed func(ctx context.Context) (serve.ExpiringFeed, func(), error)
	closers      []func()
}

// transportDriver opens a fanned-out set's backend.
type transportDriver struct {
	// name is the value of the config file's "fanout" key.
	name string
	// keys are the set keys of the config file that configure the
	// transport, each storing its value into the FanoutConfig.
	keys map[string]func(f *FanoutConfig, value string) error
	// check reports what the transport's sub-config lacks.
	check func(f *FanoutConfig) error
	// open connects the set's backend within the set's connect timeout;
	// closers release it.
	open func(ctx context.Context, s *SetConfig, key []byte, log *slog.Logger) (b fanout.Backend, closers []func(), err error)
}

var (
	sources    = map[SourceDriver]sourceDriver{}
	transports = map[Transport]transportDriver{}
)

func registerSource(d SourceDriver, sd sourceDriver)    { sources[d] = sd }
func registerTransport(t Transport, td transportDriver) { transports[t] = td }

// positionNotation is the notation of the keyspace's positions (in
// BF.EXISTSAT's token, the HTTP API's at= and its reports): that of the
// registered source with one, lowest SourceDriver first. A server has one:
// a second source with a notation of its own would need one per set.
func positionNotation() changefeed.Notation {
	for _, d := range slices.Sorted(maps.Keys(sources)) {
		if p := sources[d].positions; p != nil {
			return p
		}
	}
	return changefeed.Decimal
}

// sourceByName returns the driver a config-file key names.
func sourceByName(name string) (SourceDriver, bool) {
	for d, sd := range sources {
		if sd.name == name {
			return d, true
		}
	}
	return SourceNone, false
}

// transportByName returns the transport a "fanout" value names.
func transportByName(name string) (Transport, bool) {
	for t, td := range transports {
		if td.name == name {
			return t, true
		}
	}
	return TransportNone, false
}

// transportKey returns the transport whose config-file key key is.
func transportKey(key string) (func(*FanoutConfig, string) error, bool) {
	for _, td := range transports {
		if f, ok := td.keys[key]; ok {
			return f, true
		}
	}
	return nil, false
}

// transportNames lists the registered transports for an error: "a, b or c".
func transportNames() string {
	var names []string
	for _, td := range transports {
		names = append(names, td.name)
	}
	slices.Sort(names)
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
