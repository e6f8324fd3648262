package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/fanout"
)

// serveFile is the `bloomgate serve -config FILE` format: one "key value"
// pair per line, as redis.conf; '#' starts a comment line, and " #" starts a
// comment after an unquoted value; a value may be double-quoted (Go syntax)
// to keep " #" or surrounding spaces. Table-backed sets are blocks:
//
//	resp 127.0.0.1:6380
//	http 127.0.0.1:8080
//	data ./bloomgate-data
//	requirepass s3cret
//	appendfsync everysec
//	maxmemory 2gb
//
//	set users {
//	  postgres postgres://app@127.0.0.1:5432/app
//	  table users
//	  column email
//	  confirm SELECT 1 FROM users WHERE email = $1
//	  normalize lowertrim
//	  kind bloom
//	  fp-rate 0.001
//	  # follow yes: the change feed (the default); follow no: rebuild-only
//	  # fanout jetstream, nats nats://a:4222,nats://b:4222, replicas 3
//	}
//
// An unknown key, a repeated key, or a bad value is an error naming the key
// and its line.
type serveFile struct {
	RESP, HTTP, Data, Password string
	Fsync                      string
	SnapshotInterval           time.Duration
	MaxMemory                  int64
	MaxClients                 int
	MaxBulkLen                 int64
	MaxArgs                    int
	Timeout                    time.Duration // RESP idle timeout
	PreAuthMaxClients          int           // resp.Config.MaxPreAuthConns
	PreAuthTimeout             time.Duration // resp.Config.PreAuthTimeout
	AuthFailureDelay           time.Duration // resp.Config.AuthFailureDelay
	HTTPReadHeaderTimeout      time.Duration
	HTTPIdleTimeout            time.Duration
	TLSCertFile, TLSKeyFile    string
	Postgres                   postgresFrontDecl // the PostgreSQL front end (servepg.go)
	Sets                       []setDecl
	given                      map[string]bool // the top-level keys the file wrote, "" values included
}

// setDecl is one "set NAME { … }" block.
type setDecl struct {
	Name, Line                    string
	Postgres, SQLite              string // at most one: the DSN or the file
	Query, Table, Column, Confirm string
	Kind, Normalize               string
	FPRate                        float64
	Capacity                      uint64
	RebuildInterval               time.Duration
	// kind expiring: see serve_expiring.go
	FollowGiven   bool // "follow" was written
	ExpiresColumn string
	MaxTTL        time.Duration
	Generations   int

	// The change feed. Follow is false only with "follow no".
	Follow            bool
	Slot, Publication string
	MaxLag            time.Duration // FollowConfig.MaxLag; 0: its default
	SnapshotInterval  time.Duration // FollowConfig.SnapshotInterval; 0: its default
	ConnectTimeout    time.Duration // bound on each start-up check; 0: defaultConnectTimeout

	// The fan-out: "" (none), "jetstream" or "redis".
	Fanout   string
	Feeder   string // "yes", "no" or "" (yes when the set has a postgres DSN)
	LeaseTTL time.Duration
	Replicas int
	NATS     natsDecl
	Redis    string // redis:// or rediss:// URL
	KeyFile  string // fanout-key-file: the shared MAC key (fanout Config.Key)
	Unsigned bool   // fanout-unsigned yes: no key, the servers' permissions only

	// Answers are the statements the PostgreSQL front end answers from
	// the set ("answer", which may be repeated).
	Answers []string
}

// natsDecl is how a set reaches NATS, as nats.go takes it.
type natsDecl struct {
	URLs                   string // comma-separated
	Creds, NKey            string // files
	User, Password, Token  string
	TLSCA, TLSCert, TLSKey string // files
}

// defaultConnectTimeout bounds each check serve makes of a set's servers at
// start (connect, wal_level, publication, NATS, Redis), so that a server
// that accepts and never answers is an error within seconds.
const defaultConnectTimeout = 5 * time.Second

// feeder reports whether this process may become the set's feeder.
func (s *setDecl) feeder() bool {
	if s.Feeder == "" {
		return s.Postgres != ""
	}
	return s.Feeder == "yes"
}

type confLine struct {
	n          int
	key, value string
}

func parseServeFile(r io.Reader) (*serveFile, error) {
	f := &serveFile{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := map[string]int{}
	var set *setDecl
	var setSeen map[string]int
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, _ := strings.Cut(line, " ")
		key = strings.ToLower(strings.TrimSpace(key))
		value = strings.TrimSpace(value)
		if strings.HasPrefix(value, `"`) {
			v, err := strconv.Unquote(value)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: bad quoted value", n, key)
			}
			value = v
		} else if i := strings.Index(value, " #"); i >= 0 {
			value = strings.TrimSpace(value[:i]) // a trailing comment
		}
		l := confLine{n, key, value}
		switch {
		case set != nil && key == "}":
			f.Sets = append(f.Sets, *set)
			set = nil
		case set != nil:
			if prev, dup := setSeen[key]; dup && key != "answer" {
				return nil, fmt.Errorf("line %d: %s given twice in set %q (first on line %d)", n, key, set.Name, prev)
			}
			setSeen[key] = n
			if err := set.apply(l); err != nil {
				return nil, err
			}
		case key == "set":
			name, brace, ok := strings.Cut(value, " ")
			if !ok || strings.TrimSpace(brace) != "{" || name == "" {
				return nil, fmt.Errorf("line %d: set: want \"set NAME {\"", n)
			}
			for _, s := range f.Sets {
				if s.Name == name {
					return nil, fmt.Errorf("line %d: set %q declared twice", n, name)
				}
			}
			set = &setDecl{Name: name, Line: strconv.Itoa(n), Follow: true}
			setSeen = map[string]int{}
		default:
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("line %d: %s given twice (first on line %d)", n, key, prev)
			}
			seen[key] = n
			if err := f.apply(l); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if set != nil {
		return nil, fmt.Errorf("line %s: set %q: missing closing \"}\"", set.Line, set.Name)
	}
	f.given = map[string]bool{}
	for k := range seen {
		f.given[k] = true
	}
	for i := range f.Sets {
		if err := f.Sets[i].checkExpiring(); err != nil {
			return nil, err
		}
		if err := f.Sets[i].check(); err != nil {
			return nil, fmt.Errorf("line %s: set %q: %w", f.Sets[i].Line, f.Sets[i].Name, err)
		}
	}
	if err := f.Postgres.check(f.Sets); err != nil {
		return nil, err
	}
	return f, nil
}

// check validates a set block as a whole.
func (s *setDecl) check() error {
	rebuildOnly := `or "follow no" for rebuild-only (rows written by others are not seen until a rebuild)`
	switch {
	case s.Postgres != "" && s.SQLite != "":
		return errors.New("give one of postgres or sqlite, not both")
	case s.Fanout == "" && s.Postgres == "" && s.SQLite == "":
		return errors.New("give exactly one of postgres or sqlite")
	case s.Fanout != "" && s.SQLite != "":
		return errors.New("fanout: an sqlite set has no change feed to fan out")
	case s.Fanout != "" && !s.Follow:
		return errors.New(`fanout: a fanned-out set follows the change feed; remove "follow no"`)
	case s.Fanout != "" && !fanout.ValidSet(s.Name):
		return errors.New("fanout: the set's name must be 1-64 of A-Z a-z 0-9 _ - (it names the stream)")
	case s.Fanout == "jetstream" && s.NATS.URLs == "":
		return errors.New("fanout jetstream: give nats (a comma-separated list of URLs)")
	case s.Fanout == "" && s.KeyFile != "":
		return errors.New("fanout-key-file: the key signs a fan-out's messages: give fanout")
	case s.Fanout == "redis" && s.Redis == "":
		return errors.New("fanout redis: give redis (a redis:// URL)")
	case s.Fanout != "" && s.feeder() && s.Postgres == "":
		return errors.New("feeder yes: the feeder follows the database: give postgres")
	case s.Confirm != "" && s.Postgres == "" && s.SQLite == "":
		return errors.New("confirm: the confirm query needs the database: give postgres")
	case s.SQLite != "" && s.Follow:
		return errors.New(`follow: SQLite has no change feed: add "follow no" (rebuild-only: rows written by others are not seen until a rebuild)`)
	case s.Follow && (s.Table == "" || s.Column == ""):
		return errors.New("follow: the change feed follows a column: give table and column (query is for rebuild-only sets), " + rebuildOnly)
	case !s.Follow && s.Query == "" && (s.Table == "" || s.Column == ""):
		return errors.New("give query, or table and column")
	case !s.Follow && (s.Slot != "" || s.Publication != "" || s.MaxLag != 0 || s.SnapshotInterval != 0):
		return errors.New(`slot, publication, max-lag and snapshot-interval need the change feed; remove "follow no"`)
	case s.Fanout == "" && s.Unsigned:
		return errors.New("fanout-unsigned: give fanout")
	case s.Fanout != "" && s.KeyFile != "" && s.Unsigned:
		return errors.New(`fanout-key-file and "fanout-unsigned yes" contradict each other: give one`)
	case len(s.Answers) > 0 && (s.Postgres == "" || !s.Follow || s.Kind == "expiring"):
		return errors.New("answer: the PostgreSQL front end answers only from a set that follows a PostgreSQL table's change feed (postgres, follow yes, not expiring)")
	case s.Fanout != "" && s.KeyFile == "" && !s.Unsigned:
		// Without a key, anyone who may write the stream can append a
		// message instances cannot tell from the feeder's: a forged
		// delete is a false negative. Unsigned is a choice, not a default.
		return errors.New(`fanout: give fanout-key-file (a shared key that signs every message, so that no one else's is applied) ` +
			`or "fanout-unsigned yes" (then only the NATS or Redis permissions keep others from writing the stream)`)
	}
	return nil
}

func (l confLine) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s: %s", l.n, l.key, fmt.Sprintf(format, args...))
}

func (f *serveFile) apply(l confLine) error {
	var err error
	switch l.key {
	case "resp":
		f.RESP = l.value
	case "http":
		f.HTTP = l.value
	case "data":
		f.Data = l.value
	case "requirepass":
		f.Password = l.value
	case "appendfsync":
		if l.value != "always" && l.value != "everysec" && l.value != "no" {
			return l.errorf("want always, everysec or no")
		}
		f.Fsync = l.value
	case "snapshot-interval":
		f.SnapshotInterval, err = l.duration()
	case "maxmemory":
		f.MaxMemory, err = l.bytes()
	case "maxclients":
		f.MaxClients, err = l.positiveInt()
	case "proto-max-bulk-len":
		f.MaxBulkLen, err = l.bytes()
	case "max-args":
		f.MaxArgs, err = l.positiveInt()
	case "timeout":
		f.Timeout, err = l.duration()
	case "preauth-maxclients":
		f.PreAuthMaxClients, err = l.positiveInt()
	case "preauth-timeout":
		f.PreAuthTimeout, err = l.positiveDuration()
	case "auth-failure-delay":
		f.AuthFailureDelay, err = l.positiveDuration()
	case "http-read-header-timeout":
		f.HTTPReadHeaderTimeout, err = l.duration()
	case "http-idle-timeout":
		f.HTTPIdleTimeout, err = l.duration()
	case "tls-cert-file":
		f.TLSCertFile = l.value
	case "tls-key-file":
		f.TLSKeyFile = l.value
	case "postgres-listen", "postgres-upstream", "postgres-maxclients", "postgres-max-message-size", "postgres-position-wait":
		return f.Postgres.apply(l)
	default:
		return fmt.Errorf("line %d: unknown key %q", l.n, l.key)
	}
	return err
}

func (s *setDecl) apply(l confLine) error {
	var err error
	switch l.key {
	case "postgres":
		s.Postgres = l.value
	case "sqlite":
		s.SQLite = l.value
	case "query":
		s.Query = l.value
	case "table":
		s.Table = l.value
	case "column":
		s.Column = l.value
	case "confirm":
		s.Confirm = l.value
	case "kind":
		if l.value != "bloom" && l.value != "cuckoo" && l.value != "expiring" {
			return l.errorf("want bloom, cuckoo or expiring")
		}
		s.Kind = l.value
	case "normalize":
		if l.value != "exact" && l.value != "lowertrim" {
			return l.errorf("want exact or lowertrim")
		}
		s.Normalize = l.value
	case "fp-rate":
		s.FPRate, err = strconv.ParseFloat(l.value, 64)
		if err != nil || !(s.FPRate > 0 && s.FPRate < 1) {
			return l.errorf("want a rate in (0, 1)")
		}
	case "capacity":
		s.Capacity, err = strconv.ParseUint(l.value, 10, 64)
		if err != nil {
			return l.errorf("want a positive integer")
		}
	case "rebuild-interval":
		s.RebuildInterval, err = l.duration()
	case "expires-column", "max-ttl", "generations":
		return s.applyExpiring(l)
	case "follow":
		s.Follow, err = l.yesNo()
		s.FollowGiven = true
	case "slot":
		s.Slot = l.value
	case "publication":
		s.Publication = l.value
	case "max-lag":
		s.MaxLag, err = l.duration()
	case "snapshot-interval":
		s.SnapshotInterval, err = l.duration()
	case "connect-timeout":
		s.ConnectTimeout, err = l.duration()
	case "fanout":
		if l.value != "jetstream" && l.value != "redis" {
			return l.errorf("want jetstream or redis")
		}
		s.Fanout = l.value
	case "feeder":
		if _, err := l.yesNo(); err != nil {
			return err
		}
		s.Feeder = l.value
	case "lease-ttl":
		s.LeaseTTL, err = l.duration()
	case "replicas":
		s.Replicas, err = l.positiveInt()
	case "nats":
		s.NATS.URLs = l.value
	case "nats-creds":
		s.NATS.Creds = l.value
	case "nats-nkey":
		s.NATS.NKey = l.value
	case "nats-user":
		s.NATS.User = l.value
	case "nats-password":
		s.NATS.Password = l.value
	case "nats-token":
		s.NATS.Token = l.value
	case "nats-tls-ca":
		s.NATS.TLSCA = l.value
	case "nats-tls-cert":
		s.NATS.TLSCert = l.value
	case "nats-tls-key":
		s.NATS.TLSKey = l.value
	case "redis":
		s.Redis = l.value
	case "fanout-unsigned":
		s.Unsigned, err = l.yesNo()
	case "answer":
		if l.value == "" {
			return l.errorf("want a statement such as \"SELECT id FROM users WHERE email = $1\"")
		}
		s.Answers = append(s.Answers, l.value)
	case "fanout-key-file":
		if l.value == "" {
			return l.errorf("want the path of a file holding the key")
		}
		s.KeyFile = l.value
	default:
		return fmt.Errorf("line %d: unknown key %q in set %q", l.n, l.key, s.Name)
	}
	return err
}

func (l confLine) yesNo() (bool, error) {
	switch l.value {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, l.errorf("want yes or no")
}

func (l confLine) duration() (time.Duration, error) {
	d, err := time.ParseDuration(l.value)
	if err != nil || d < 0 {
		return 0, l.errorf("want a duration such as 30s or 5m")
	}
	return d, nil
}

// positiveDuration is a duration above zero, for bounds where 0 would
// mean "none" and so disarm a defence.
func (l confLine) positiveDuration() (time.Duration, error) {
	d, err := time.ParseDuration(l.value)
	if err != nil || d <= 0 {
		return 0, l.errorf("want a duration above zero such as 100ms or 10s")
	}
	return d, nil
}

func (l confLine) positiveInt() (int, error) {
	v, err := strconv.Atoi(l.value)
	if err != nil || v < 1 {
		return 0, l.errorf("want a positive integer")
	}
	return v, nil
}

// bytes parses a size as redis.conf does: 1024, 1k (1000), 1kb (1024), m, mb,
// g, gb.
func (l confLine) bytes() (int64, error) {
	v := strings.ToLower(l.value)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}} {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = s, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, l.errorf("want a size such as 1048576, 100mb or 2gb")
	}
	return n * mult, nil
}
