package cli

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
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
//	  query SELECT email FROM users
//	  confirm SELECT 1 FROM users WHERE email = $1
//	  normalize lowertrim
//	  kind bloom
//	  fp-rate 0.001
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
	HTTPReadHeaderTimeout      time.Duration
	HTTPIdleTimeout            time.Duration
	TLSCertFile, TLSKeyFile    string
	Sets                       []setDecl
}

// setDecl is one "set NAME { … }" block.
type setDecl struct {
	Name, Line                    string
	Postgres, SQLite              string // exactly one: the DSN or the file
	Query, Table, Column, Confirm string
	Kind, Normalize               string
	FPRate                        float64
	Capacity                      uint64
	RebuildInterval               time.Duration
	// kind expiring: see serve_expiring.go
	ExpiresColumn string
	MaxTTL        time.Duration
	Generations   int
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
			if prev, dup := setSeen[key]; dup {
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
			set = &setDecl{Name: name, Line: strconv.Itoa(n)}
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
	for _, s := range f.Sets {
		if (s.Postgres == "") == (s.SQLite == "") {
			return nil, fmt.Errorf("line %s: set %q: give exactly one of postgres or sqlite", s.Line, s.Name)
		}
		if s.Query == "" && (s.Table == "" || s.Column == "") {
			return nil, fmt.Errorf("line %s: set %q: give query, or table and column", s.Line, s.Name)
		}
		if err := s.checkExpiring(); err != nil {
			return nil, err
		}
	}
	return f, nil
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
	case "http-read-header-timeout":
		f.HTTPReadHeaderTimeout, err = l.duration()
	case "http-idle-timeout":
		f.HTTPIdleTimeout, err = l.duration()
	case "tls-cert-file":
		f.TLSCertFile = l.value
	case "tls-key-file":
		f.TLSKeyFile = l.value
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
	default:
		return fmt.Errorf("line %d: unknown key %q in set %q", l.n, l.key, s.Name)
	}
	return err
}

func (l confLine) duration() (time.Duration, error) {
	d, err := time.ParseDuration(l.value)
	if err != nil || d < 0 {
		return 0, l.errorf("want a duration such as 30s or 5m")
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
