package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/serve/pgwire"
)

// ConfigFile is a parsed config file: its Config, and the top-level keys it
// wrote.
type ConfigFile struct {
	Config
	// Given holds the top-level keys the file wrote, those given as ""
	// included, so that a command line can tell a key left out (its flag's
	// default applies) from `http ""` (HTTP off).
	Given map[string]bool
}

// ParseConfig reads the config file of `bloomgate serve`: one "key value"
// pair per line, as redis.conf; '#' starts a comment line, and " #" starts
// a comment after an unquoted value; a value may be double-quoted (Go
// syntax) to keep " #" or surrounding spaces. Table-backed sets are blocks:
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
// A key the file leaves out leaves its field zero (its default). An
// unknown key, a repeated key, or a bad value is an error naming the key
// and its line. docs/serve.md describes every key.
func ParseConfig(r io.Reader) (*ConfigFile, error) {
	f := &ConfigFile{}
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
			f.Sets = append(f.Sets, set.SetConfig)
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
			set = &setDecl{SetConfig: SetConfig{Name: name, line: n}}
			setSeen = map[string]int{}
		default:
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("line %d: %s given twice (first on line %d)", n, key, prev)
			}
			seen[key] = n
			if err := apply(&f.Config, l); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if set != nil {
		return nil, fmt.Errorf("line %d: set %q: missing closing \"}\"", set.line, set.Name)
	}
	f.Given = map[string]bool{}
	for k := range seen {
		f.Given[k] = true
	}
	if err := f.Config.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// check validates the config as a whole: each set, then the PostgreSQL
// front end against the sets. Its errors name the config file's keys and
// lines (a Config built in code has line 0).
func (c *Config) check() error {
	for i := range c.Sets {
		s := &c.Sets[i]
		if err := s.checkExpiring(); err != nil {
			return err
		}
		if err := s.check(); err != nil {
			return fmt.Errorf("%sset %q: %w", at(s.line), s.Name, err)
		}
	}
	return c.PostgresFront.check(c.Sets)
}

// setDecl is a "set NAME { … }" block being read.
type setDecl struct{ SetConfig }

// check validates a set as a whole.
func (s *SetConfig) check() error {
	rebuildOnly := `or "follow no" for rebuild-only (rows written by others are not seen until a rebuild)`
	src, fan := s.Source.Driver, s.Fanout.Transport
	td, fanned := transports[fan]
	switch {
	case s.Name == "":
		return errors.New("give the set a name")
	case !slices.Contains(setFamilies, s.family()):
		return fmt.Errorf("kind: a set's filter family is %s, not %v", kindChoices(), s.Family)
	case s.Normalize < NormalizeExact || s.Normalize > NormalizeLowerTrim:
		return fmt.Errorf("normalize: %d is not a normalizer", int(s.Normalize))
	case s.Fanout.Feeder < FeederAuto || s.Fanout.Feeder > FeederNo:
		return fmt.Errorf("feeder: %d is not a FeederRole", int(s.Fanout.Feeder))
	case src != SourceNone && sources[src].open == nil:
		return fmt.Errorf("source %v: not a registered source", src)
	case fan != TransportNone && !fanned:
		return fmt.Errorf("fanout %v: not a registered transport", fan)
	case !fanned && src == SourceNone:
		return errors.New("give exactly one of postgres or sqlite")
	case fanned && src == SourceSQLite:
		return errors.New("fanout: an sqlite set has no change feed to fan out")
	case fanned && s.RebuildOnly:
		return errors.New(`fanout: a fanned-out set follows the change feed; remove "follow no"`)
	case fanned && !fanout.ValidSet(s.Name):
		return errors.New("fanout: the set's name must be 1-64 of A-Z a-z 0-9 _ - (it names the stream)")
	case fanned && td.check != nil && td.check(&s.Fanout) != nil:
		return td.check(&s.Fanout)
	case !fanned && s.Fanout.KeyFile != "":
		return errors.New("fanout-key-file: the key signs a fan-out's messages: give fanout")
	case fanned && s.feeder() && src != SourcePostgres:
		return errors.New("feeder yes: the feeder follows the database: give postgres")
	case s.Source.Confirm != "" && src == SourceNone:
		return errors.New("confirm: the confirm query needs the database: give postgres")
	case src == SourceSQLite && s.follows():
		return errors.New(`follow: SQLite has no change feed: add "follow no" (rebuild-only: rows written by others are not seen until a rebuild)`)
	case s.follows() && (s.Source.Table == "" || s.Source.Column == ""):
		return errors.New("follow: the change feed follows a column: give table and column (query is for rebuild-only sets), " + rebuildOnly)
	case !s.follows() && s.Source.Query == "" && (s.Source.Table == "" || s.Source.Column == ""):
		return errors.New("give query, or table and column")
	case !s.follows() && s.Feed != (FeedConfig{}):
		return errors.New(`slot, publication, max-lag and snapshot-interval need the change feed; remove "follow no"`)
	case !fanned && s.Fanout.Unsigned:
		return errors.New("fanout-unsigned: give fanout")
	case fanned && s.Fanout.KeyFile != "" && s.Fanout.Unsigned:
		return errors.New(`fanout-key-file and "fanout-unsigned yes" contradict each other: give one`)
	case len(s.Answers) > 0 && (src != SourcePostgres || !s.follows() || s.expiring()):
		return errors.New("answer: the PostgreSQL front end answers only from a set that follows a PostgreSQL table's change feed (postgres, follow yes, not expiring)")
	case fanned && s.Fanout.KeyFile == "" && len(s.Fanout.Key) == 0 && !s.Fanout.Unsigned:
		// Without a key, anyone who may write the stream can append a
		// message instances cannot tell from the feeder's: a forged
		// delete is a false negative. Unsigned is a choice, not a default.
		return errors.New(`fanout: give fanout-key-file (a shared key that signs every message, so that no one else's is applied) ` +
			`or "fanout-unsigned yes" (then only the NATS or Redis permissions keep others from writing the stream)`)
	}
	return nil
}

// checkExpiring checks the keys that belong to kind expiring, and only to it
// (check does the rest: "follow no" for sqlite and for a query).
func (s *SetConfig) checkExpiring() error {
	if !s.expiring() {
		if s.Expiring != (ExpiringConfig{}) {
			return fmt.Errorf("%sset %q: expires-column, max-ttl and generations need kind expiring", at(s.line), s.Name)
		}
		return nil
	}
	switch {
	case s.Expiring.MaxTTL == 0:
		return fmt.Errorf("%sset %q: kind expiring needs max-ttl", at(s.line), s.Name)
	case s.Capacity == 0:
		return fmt.Errorf("%sset %q: kind expiring needs capacity (revocations per max-ttl)", at(s.line), s.Name)
	case s.Source.Query == "" && s.Expiring.ExpiresColumn == "":
		return fmt.Errorf("%sset %q: kind expiring needs expires-column, or a query returning the key and its expiry", at(s.line), s.Name)
	case s.Source.Confirm != "" || s.Normalize != NormalizeExact:
		return fmt.Errorf("%sset %q: kind expiring takes no confirm or normalize", at(s.line), s.Name)
	case s.Fanout.Transport != TransportNone:
		return fmt.Errorf("%sset %q: kind expiring takes no fanout", at(s.line), s.Name)
	case s.follows() && s.Source.Driver == SourcePostgres && s.RebuildInterval != 0:
		return fmt.Errorf("%sset %q: rebuild-interval: an expiring set that follows the change feed never rescans; "+
			"remove it, or set \"follow no\" for rescan-only (rows written without BG.XADD are not seen until a rescan)", at(s.line), s.Name)
	case s.Feed.SnapshotInterval != 0:
		return fmt.Errorf("%sset %q: kind expiring takes no snapshot-interval (it is rebuilt from the table at every start)", at(s.line), s.Name)
	}
	return nil
}

// check validates the front end and the sets' answer statements.
func (p *PostgresFrontConfig) check(sets []SetConfig) error {
	for _, s := range sets {
		for _, sql := range s.Answers {
			if _, err := pgwire.ParseTemplate(sql, s.Source.Table, s.Source.Column); err != nil {
				return fmt.Errorf("%sset %q: answer %q: %w", at(s.line), s.Name, sql, err)
			}
		}
	}
	if p.Listen != "" && p.Upstream == "" {
		return fmt.Errorf("%spostgres-listen: give postgres-upstream (the PostgreSQL server's host:port)", at(p.line))
	}
	if p.Listen == "" {
		for _, s := range sets {
			if len(s.Answers) > 0 {
				return fmt.Errorf("%sset %q: answer: give postgres-listen (the PostgreSQL front end is off)", at(s.line), s.Name)
			}
		}
	}
	return nil
}

// at returns "line N: " for an error about the config file's line n, and
// "" for a Config built in code (n 0).
func at(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("line %d: ", n)
}

type confLine struct {
	n          int
	key, value string
}

func (l confLine) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s: %s", l.n, l.key, fmt.Sprintf(format, args...))
}

// apply sets a top-level key.
func apply(c *Config, l confLine) error {
	var err error
	switch l.key {
	case "resp":
		c.RESP = l.value
	case "http":
		c.HTTP = l.value
	case "data":
		c.DataDir = l.value
	case "requirepass":
		// An empty value (a template's unset variable) would leave the
		// server open while the file asks for a password.
		if l.value == "" {
			return l.errorf("want a password (remove the line for none)")
		}
		c.Password = l.value
	case "appendfsync":
		if l.value != "always" && l.value != "everysec" && l.value != "no" {
			return l.errorf("want always, everysec or no")
		}
		c.Fsync = serve.Fsync(l.value)
	case "snapshot-interval":
		c.SnapshotInterval, err = l.duration()
	case "maxmemory":
		c.MaxMemory, err = l.bytes()
	case "maxclients":
		c.RESPLimits.MaxClients, err = l.positiveInt()
	case "proto-max-bulk-len":
		c.RESPLimits.MaxBulkLen, err = l.bytes()
	case "max-args":
		c.RESPLimits.MaxArgs, err = l.positiveInt()
	case "timeout":
		c.RESPLimits.Timeout, err = l.duration()
	case "preauth-maxclients":
		c.RESPLimits.PreAuthMaxClients, err = l.positiveInt()
	case "preauth-timeout":
		c.RESPLimits.PreAuthTimeout, err = l.positiveDuration()
	case "auth-failure-delay":
		c.RESPLimits.AuthFailureDelay, err = l.positiveDuration()
	case "http-read-header-timeout":
		c.HTTPReadHeaderTimeout, err = l.duration()
	case "http-idle-timeout":
		c.HTTPIdleTimeout, err = l.duration()
	case "tls-cert-file":
		c.TLSCertFile = l.value
	case "tls-key-file":
		c.TLSKeyFile = l.value
	case "postgres-listen", "postgres-upstream", "postgres-maxclients", "postgres-max-message-size", "postgres-position-wait":
		return c.PostgresFront.apply(l)
	default:
		return fmt.Errorf("line %d: unknown key %q", l.n, l.key)
	}
	return err
}

// apply sets a key of the PostgreSQL front end:
//
//	postgres-listen 127.0.0.1:6432
//	postgres-upstream 127.0.0.1:5432    # or postgres://host:port/?sslmode=… (pgwire.Config.Upstream)
//	postgres-maxclients 1000            # pgwire.Config.MaxConns
//	postgres-max-message-size 64mb      # pgwire.Config.MaxMessageSize
//	postgres-position-wait 100ms        # pgwire.Config.PositionWait
func (p *PostgresFrontConfig) apply(l confLine) error {
	var err error
	switch l.key {
	case "postgres-listen":
		p.Listen, p.line = l.value, l.n
	case "postgres-upstream":
		if err := pgwire.CheckUpstream(l.value); err != nil {
			return l.errorf("want the PostgreSQL server's host:port or a postgres:// URL: %v", err)
		}
		p.Upstream = l.value
	case "postgres-maxclients":
		p.MaxConns, err = l.positiveInt()
	case "postgres-max-message-size":
		p.MaxMessageSize, err = l.bytes()
		if err == nil && (p.MaxMessageSize < 1024 || p.MaxMessageSize > 1<<30) {
			return l.errorf("want a size from 1kb to 1gb")
		}
	case "postgres-position-wait":
		p.PositionWait, err = l.positiveDuration()
	}
	return err
}

// apply sets a key of a set block.
func (s *setDecl) apply(l confLine) error {
	var err error
	switch l.key {
	case "query":
		s.Source.Query = l.value
	case "table":
		s.Source.Table = l.value
	case "column":
		s.Source.Column = l.value
	case "confirm":
		s.Source.Confirm = l.value
	case "kind":
		f, ok := parseKind(l.value)
		if !ok {
			return l.errorf("want %s", kindChoices())
		}
		s.Family = f
	case "normalize":
		switch l.value {
		case "exact":
			s.Normalize = NormalizeExact
		case "lowertrim":
			s.Normalize = NormalizeLowerTrim
		default:
			return l.errorf("want exact or lowertrim")
		}
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
	case "expires-column":
		s.Expiring.ExpiresColumn = l.value
	case "max-ttl":
		s.Expiring.MaxTTL, err = l.duration()
	case "generations":
		g, err := strconv.Atoi(l.value)
		if err != nil || g < 2 || g > 64 {
			return l.errorf("want an integer from 2 to 64")
		}
		s.Expiring.Generations = g
	case "follow":
		var follow bool
		follow, err = l.yesNo()
		s.RebuildOnly = !follow
	case "slot":
		s.Feed.Slot = l.value
	case "publication":
		s.Feed.Publication = l.value
	case "max-lag":
		s.Feed.MaxLag, err = l.positiveDuration()
	case "snapshot-interval":
		s.Feed.SnapshotInterval, err = l.positiveDuration()
	case "connect-timeout":
		s.ConnectTimeout, err = l.positiveDuration()
	case "fanout":
		t, ok := transportByName(l.value)
		if !ok {
			return l.errorf("want %s", transportNames())
		}
		s.Fanout.Transport = t
	case "feeder":
		var yes bool
		if yes, err = l.yesNo(); err != nil {
			return err
		}
		s.Fanout.Feeder = FeederNo
		if yes {
			s.Fanout.Feeder = FeederYes
		}
	case "lease-ttl":
		s.Fanout.LeaseTTL, err = l.positiveDuration()
	case "replicas":
		s.Fanout.Replicas, err = l.positiveInt()
	case "fanout-unsigned":
		s.Fanout.Unsigned, err = l.yesNo()
	case "fanout-key-file":
		if l.value == "" {
			return l.errorf("want the path of a file holding the key")
		}
		s.Fanout.KeyFile = l.value
	case "answer":
		if l.value == "" {
			return l.errorf("want a statement such as \"SELECT id FROM public.users WHERE email = $1\"")
		}
		s.Answers = append(s.Answers, l.value)
	default:
		if d, ok := sourceByName(l.key); ok {
			if s.Source.Driver != SourceNone && s.Source.Driver != d {
				return fmt.Errorf("%sset %q: give one of postgres or sqlite, not both", at(s.line), s.Name)
			}
			s.Source.Driver, s.Source.DSN = d, l.value
			return nil
		}
		if set, ok := transportKey(l.key); ok {
			return set(&s.Fanout, l.value)
		}
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

// kindChoices lists the kinds as the config file names them: "bloom,
// cuckoo or expiring".
func kindChoices() string {
	var names []string
	for _, f := range setFamilies {
		names = append(names, kindName(f))
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// parseKind returns the family of the set kind the config file names name.
func parseKind(name string) (*filter.Family, bool) {
	for _, f := range setFamilies {
		if kindName(f) == name {
			return f, true
		}
	}
	return nil, false
}
