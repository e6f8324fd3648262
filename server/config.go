package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/fanout/memlog"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/serve"
)

// Config is a server: its listeners, its keyspace's storage and its
// table-backed sets. The zero value of every field means its default; the
// zero Config serves standalone filters in memory and listens nowhere.
// ParseConfig reads one from the config file of `bloomgate serve`.
type Config struct {
	// RESP is the Redis protocol's listen address ("127.0.0.1:0" picks a
	// port; Server.RESPAddr says which). Default: "", no RESP listener.
	RESP string
	// HTTP is the HTTP API's listen address. Default: "", no HTTP listener.
	HTTP string
	// DataDir holds the snapshot, the log and the sets' snapshots.
	// Default: "", everything in memory only.
	DataDir string
	// Password is required by AUTH and as the HTTP bearer token. Without
	// one, Start refuses a listen address that is not loopback (protected
	// mode). Default: "", none.
	Password string
	// Fsync is the log's fsync policy. Default: serve.FsyncEverySec.
	Fsync serve.Fsync
	// SnapshotInterval is how often the keyspace is snapshotted when it
	// changed. Default: serve.Config's (5 minutes).
	SnapshotInterval time.Duration
	// MaxMemory bounds the bytes of standalone filters (redis.conf's
	// maxmemory). Default: 0, no bound.
	MaxMemory int64

	// RESPLimits are the Redis protocol's limits; zero fields take resp's
	// defaults.
	RESPLimits RESPLimits
	// HTTPReadHeaderTimeout bounds reading a request's header. Default:
	// 10 s.
	HTTPReadHeaderTimeout time.Duration
	// HTTPIdleTimeout closes an idle keep-alive connection. Default: 2 min.
	HTTPIdleTimeout time.Duration

	// TLSCertFile and TLSKeyFile, if set, make the RESP and HTTP listeners
	// speak TLS only, and the PostgreSQL front end accept its clients'
	// SSLRequest (plain-text clients too). Default: "", plain TCP.
	TLSCertFile, TLSKeyFile string

	// PostgresFront is the PostgreSQL wire-protocol front end. Default:
	// off.
	PostgresFront PostgresFrontConfig

	// Sets are the table-backed sets.
	Sets []SetConfig

	// Logger receives the server's events. Default: discard.
	Logger *slog.Logger
	// Registry receives the server's and the sets' metrics, and is what
	// the HTTP /metrics endpoint serves; one Registry serves one Server
	// (a second Start on it fails). Default: a new registry
	// with the Go and process collectors.
	Registry *prometheus.Registry
}

// RESPLimits bound the Redis protocol's clients (resp.Config). The zero
// value of every field means resp's default.
type RESPLimits struct {
	MaxClients        int           // maxclients: resp.Config.MaxConns
	MaxBulkLen        int64         // proto-max-bulk-len: resp.Config.MaxBulkLen
	MaxArgs           int           // max-args: resp.Config.MaxArgs
	Timeout           time.Duration // timeout: resp.Config.IdleTimeout
	PreAuthMaxClients int           // preauth-maxclients: resp.Config.MaxPreAuthConns
	PreAuthTimeout    time.Duration // preauth-timeout: resp.Config.PreAuthTimeout
	AuthFailureDelay  time.Duration // auth-failure-delay: resp.Config.AuthFailureDelay
}

// PostgresFrontConfig is the PostgreSQL front end (serve/pgwire): it
// answers each set's Answers statements from the set's filter and relays
// everything else to Upstream. Zero values of the limits mean pgwire's
// defaults.
type PostgresFrontConfig struct {
	// Listen is the front end's listen address. Default: "", off.
	Listen string
	// Upstream is the PostgreSQL server: host:port, or a postgres:// URL
	// whose sslmode and other TLS parameters are honoured (see
	// pgwire.Config.Upstream). Required with Listen. The front end's
	// clients get TLS with Config's TLS certificate (TLSCertFile).
	Upstream       string
	MaxConns       int           // pgwire.Config.MaxConns
	MaxMessageSize int64         // pgwire.Config.MaxMessageSize
	PositionWait   time.Duration // pgwire.Config.PositionWait

	line int // of postgres-listen, for ParseConfig's errors
}

// setFamilies are the filter families a set can have (filter.Families
// names them). Counting and scalable filters could back a set's gate too
// (bloomgate.FamilyFilter) but no test runs a set over them, so they are
// not offered.
var setFamilies = []*filter.Family{filter.FamilyBloom, filter.FamilyCuckoo, filter.FamilyWindowed}

// kindName is the config file's name of a set of family f (its "kind"):
// the family's name, except "expiring" for filter.FamilyWindowed (a set
// whose rows carry an expiry).
func kindName(f *filter.Family) string {
	if f == filter.FamilyWindowed {
		return "expiring"
	}
	return f.String()
}

// Normalize is how a set maps keys before hashing them.
type Normalize int

const (
	// NormalizeExact takes keys as they are (bloomgate.Exact). The default.
	NormalizeExact Normalize = iota
	// NormalizeLowerTrim lower-cases keys and trims their spaces
	// (bloomgate.LowerTrim).
	NormalizeLowerTrim
)

// FeederRole says whether a process of a fanned-out set may become its
// feeder.
type FeederRole int

const (
	// FeederAuto: the process may become the feeder when the set has a
	// source with a change feed (PostgreSQL). The default.
	FeederAuto FeederRole = iota
	// FeederYes: it competes for the feeder's lease (it needs the source).
	FeederYes
	// FeederNo: it is an instance only.
	FeederNo
)

// DefaultConnectTimeout is SetConfig.ConnectTimeout's default.
const DefaultConnectTimeout = 5 * time.Second

// SetConfig declares a table-backed set. The zero value of every field but
// Name and Source means its default.
type SetConfig struct {
	// Name is the key clients use. Required.
	Name string
	// Family is the set's filter family: filter.FamilyBloom (a blocked
	// Bloom filter: a removed row's key stays a false positive until the
	// next rebuild), filter.FamilyCuckoo (removes apply at once), or
	// filter.FamilyWindowed, a set whose rows expire (Expiring; the config
	// file's "kind expiring"). Default (nil): filter.FamilyBloom.
	Family *filter.Family
	// Source is where the set's rows are. Required, except for a
	// fanned-out set's instance (FeederNo), which reads the fan-out only.
	Source SourceConfig
	// Normalize maps keys on every path. Default: NormalizeExact.
	Normalize Normalize
	// FPRate is the target false-positive rate. Default: the gate's
	// (0.001).
	FPRate float64
	// Capacity sizes the filter (for an expiring set: rows per MaxTTL,
	// required). Default: sized from the table.
	Capacity uint64
	// RebuildInterval rebuilds (an expiring set: rescans) the set from the
	// table this often. Default: only when the gate's triggers fire (a
	// rescan-only expiring set: every minute).
	RebuildInterval time.Duration
	// RebuildOnly turns the change feed off ("follow no"): the set learns
	// of rows others write only by rebuilding. Default: false, the set
	// follows the source's change feed.
	RebuildOnly bool
	// Feed configures the change feed of a followed set.
	Feed FeedConfig
	// ConnectTimeout bounds each check Start makes of the set's servers
	// (connect, wal_level, publication, NATS, Redis). Default:
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Expiring sizes an expiring set (Family filter.FamilyWindowed).
	Expiring ExpiringConfig
	// Fanout, if its Transport is set, carries the set's changes from one
	// feeder to every process of the set. Default: none.
	Fanout FanoutConfig
	// Answers are the statements the PostgreSQL front end answers from
	// the set (its filter says "absent": an empty result).
	Answers []string

	line int // the set's line in the config file, for errors
}

// SourceConfig is a set's table: which registered source reads it
// (Driver), the database (DSN), and the table's key column or a query.
type SourceConfig struct {
	// Driver names the source: SourcePostgres or SourceSQLite. Default:
	// SourceNone.
	Driver SourceDriver
	// DSN is the database: a postgres:// URL, or an SQLite file.
	DSN string
	// Query returns the keys (rebuild-only sets; for an expiring set, the key
	// and its expiry). Default: Table and Column.
	Query string
	// Table and Column name the keys' column. A followed set needs them.
	Table, Column string
	// Confirm, if set, is a query answering BG.EXISTS exactly: $1 is the
	// key as the client sent it.
	Confirm string
}

// FeedConfig is a followed set's change feed.
type FeedConfig struct {
	// Slot is the replication slot. Default: source/postgres's.
	Slot string
	// Publication is the publication. Default: named after the slot.
	Publication string
	// MaxLag bounds the set's staleness: past it the set fails open.
	// Default: bloomgate.DefaultMaxLag (30 s).
	MaxLag time.Duration
	// SnapshotInterval is how often the set's filter is snapshotted.
	// Default: bloomgate.FollowConfig's.
	SnapshotInterval time.Duration
}

// ExpiringConfig sizes an expiring set (serve.ExpiringParams).
type ExpiringConfig struct {
	// ExpiresColumn is the rows' expiry: timestamptz (PostgreSQL), Unix
	// seconds or text (SQLite). Required without Source.Query.
	ExpiresColumn string
	// MaxTTL is the furthest expiry ahead. Required.
	MaxTTL time.Duration
	// Generations is the filter's generations (2 to 64). Default:
	// serve.ExpiringParams's.
	Generations int
}

// FanoutConfig is how a set is fanned out (docs/design.md, Fan-out). A
// Transport's own settings are in its sub-config.
type FanoutConfig struct {
	// Transport carries the set. Default: TransportNone, no fan-out.
	Transport Transport
	// Feeder says whether this process may become the feeder. Default:
	// FeederAuto.
	Feeder FeederRole
	// LeaseTTL is the feeder lease's lifetime. Default: the transport's.
	LeaseTTL time.Duration
	// Replicas is the transport's replica count (JetStream) or the
	// replicas a write waits for (Redis WAIT). Default: the transport's.
	Replicas int
	// Key signs every message (at least 16 bytes; every process of the set
	// needs the same). Default: read from KeyFile.
	Key []byte
	// KeyFile holds the key: the file's bytes less one trailing newline.
	KeyFile string
	// Unsigned must be true to fan out without a key: only the
	// transport's permissions then keep others from writing the stream.
	Unsigned bool

	// NATS configures TransportJetStream.
	NATS NATSConfig
	// Redis configures TransportRedis.
	Redis RedisConfig
	// Memory configures TransportMemory.
	Memory MemoryConfig
}

// NATSConfig is how a set reaches NATS (fanout/jetstream.DialConfig).
type NATSConfig struct {
	URLs                   string // comma-separated; required
	Creds, NKey            string // files
	User, Password, Token  string
	TLSCA, TLSCert, TLSKey string // files
}

// RedisConfig is how a set reaches Redis (fanout/redisstream).
type RedisConfig struct {
	// URL is a redis:// or rediss:// URL. Required.
	URL string
}

// MemoryConfig is an in-process fan-out (fanout/memlog).
type MemoryConfig struct {
	// Set is the log the set's processes share: servers of one process
	// given the same Set are one set's feeder and instances. Default: a
	// log of this server's own.
	Set *memlog.Set
}

// connectTimeout returns the set's ConnectTimeout or its default.
func (s *SetConfig) connectTimeout() time.Duration {
	if s.ConnectTimeout == 0 {
		return DefaultConnectTimeout
	}
	return s.ConnectTimeout
}

// family is the set's filter family, the default filled in.
func (s *SetConfig) family() *filter.Family {
	if s.Family == nil {
		return filter.FamilyBloom
	}
	return s.Family
}

// expiring reports whether the set's rows expire (filter.FamilyWindowed).
func (s *SetConfig) expiring() bool { return s.Family == filter.FamilyWindowed }

// follows reports whether the set follows a change feed.
func (s *SetConfig) follows() bool { return !s.RebuildOnly }

// feeder reports whether this process may become the set's feeder.
func (s *SetConfig) feeder() bool {
	switch s.Fanout.Feeder {
	case FeederYes:
		return true
	case FeederNo:
		return false
	}
	return s.Source.Driver == SourcePostgres
}

// tlsConfig loads the certificate, or returns nil without one.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCertFile == "" && c.TLSKeyFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
