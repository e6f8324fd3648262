package pgwire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The statements a set may answer are checked, and clients' statements
// matched against them, with a small tokenizer of PostgreSQL's lexical
// syntax (comments, quoted identifiers, '' E'' and $$ strings, numbers,
// operators) and a recogniser of one restricted shape. Nothing here plans
// or evaluates SQL: a statement the recogniser does not accept is refused
// at start, and a client statement that does not match a configured one
// token for token is forwarded.

type tokKind uint8

const (
	tokIdent  tokKind = iota + 1 // unquoted, folded to lower case
	tokQIdent                    // "quoted", as written
	tokParam                     // $n
	tokString                    // '…', E'…' or $tag$…$tag$: val is the decoded text
	tokNumber
	tokOp // operators and punctuation
)

type token struct {
	kind tokKind
	val  string
	// escape marks an E'' string: its decoded value depends on no
	// session setting (a plain '' string depends on
	// standard_conforming_strings).
	escape bool
}

// Errors of the tokenizer.
var (
	errUnterminated = errors.New("unterminated string, quoted identifier or comment")
	errBadEscape    = errors.New("bad escape in E'' string")
	errBadChar      = errors.New("unexpected character")
	errTooLong      = errors.New("statement too long")
)

// maxStatementLen bounds what the tokenizer reads: configured statements
// and the clients' statements compared with them are short; longer text is
// never one of them.
const maxStatementLen = 64 << 10

// tokenize splits s into tokens. It fails on text PostgreSQL's lexer would
// also reject, and on a few forms it does not need (U&'…' strings, B'…'/X'…'
// bit strings are returned as an error so that they never match).
func tokenize(s string) ([]token, error) { return tokenizeInto(nil, s) }

// tokenizeInto is tokenize appending to out[:0], so that a session reuses
// one slice for every statement it matches. The tokens' values are s's
// substrings where they can be: valid while s is.
func tokenizeInto(out []token, s string) ([]token, error) {
	out = out[:0]
	if len(s) > maxStatementLen {
		return out, errTooLong
	}
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			depth := 0
			for {
				if i+1 >= len(s) {
					return out, errUnterminated
				}
				if s[i] == '/' && s[i+1] == '*' {
					depth++
					i += 2
				} else if s[i] == '*' && s[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		case (c == 'e' || c == 'E') && i+1 < len(s) && s[i+1] == '\'':
			v, n, err := scanEString(s[i+1:])
			if err != nil {
				return out, err
			}
			out = append(out, token{kind: tokString, val: v, escape: true})
			i += 1 + n
		case (c == 'u' || c == 'U' || c == 'b' || c == 'B' || c == 'x' || c == 'X' || c == 'n' || c == 'N') &&
			i+1 < len(s) && (s[i+1] == '\'' || s[i+1] == '&'):
			return out, fmt.Errorf("%w: %q string", errBadChar, s[i:i+2])
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentCont(s[j]) {
				j++
			}
			out = append(out, token{kind: tokIdent, val: lowerIdent(s[i:j])})
			i = j
		case c == '"':
			v, n, err := scanQuoted(s[i:], '"')
			if err != nil {
				return out, err
			}
			if v == "" {
				return out, fmt.Errorf("%w: empty quoted identifier", errBadChar)
			}
			out = append(out, token{kind: tokQIdent, val: v})
			i += n
		case c == '\'':
			v, n, err := scanQuoted(s[i:], '\'')
			if err != nil {
				return out, err
			}
			out = append(out, token{kind: tokString, val: v})
			i += n
		case c == '$' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j-i > 6 {
				return out, fmt.Errorf("%w: parameter number", errBadChar)
			}
			out = append(out, token{kind: tokParam, val: s[i:j]})
			i = j
		case c == '$':
			v, n, err := scanDollar(s[i:])
			if err != nil {
				return out, err
			}
			out = append(out, token{kind: tokString, val: v, escape: true})
			i += n
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == '_' ||
				s[j] == 'e' || s[j] == 'E' || (s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			out = append(out, token{kind: tokNumber, val: strings.ToLower(s[i:j])})
			i = j
		case c == ':' && i+1 < len(s) && s[i+1] == ':':
			out = append(out, token{kind: tokOp, val: "::"})
			i += 2
		case strings.IndexByte("<>=!", c) >= 0:
			j := i + 1
			for j < len(s) && strings.IndexByte("<>=!", s[j]) >= 0 {
				j++
			}
			op := s[i:j]
			if op == "!=" {
				op = "<>"
			}
			out = append(out, token{kind: tokOp, val: op})
			i = j
		case strings.IndexByte("(),.;*+-/%[]:|&^~#@?", c) >= 0:
			out = append(out, token{kind: tokOp, val: s[i : i+1]})
			i++
		default:
			return out, fmt.Errorf("%w %q", errBadChar, c)
		}
	}
	return out, nil
}

// lowerIdent folds an unquoted identifier to lower case as PostgreSQL does
// in a multibyte encoding (ASCII letters only: "Über" stays another name
// than "über"), without allocating for one already in lower case or for a
// keyword of the statements the front end matches.
func lowerIdent(s string) string {
	upper := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			upper = true
			break
		}
	}
	if !upper {
		return s
	}
	if len(s) <= maxKeywordLen {
		var buf [maxKeywordLen]byte
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		if k, ok := keywords[string(buf[:len(s)])]; ok { // no allocation for the lookup
			return k
		}
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// keywords are the words the configured statements' shape is made of, and
// those of the statements relayed most, interned by lowerIdent (nothing
// else reads them).
var keywords = func() map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields("select from where and or not in is null as on join inner left right full outer cross " +
		"limit offset order by group having distinct all any some union intersect except for update share nowait skip locked " +
		"with text varchar character varying collate asc desc true false between like ilike similar to cast exists case when then else end " +
		// Words of the statements a front end relays most (pgbench's among
		// them): interned too, so that scanning them allocates nothing.
		"begin start transaction commit rollback abort savepoint release insert into values set delete returning " +
		"default current_timestamp now show") {
		m[w] = w
	}
	return m
}()

const maxKeywordLen = 16

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// scanQuoted reads a q-quoted token at the start of s, with qq standing for
// one q, and returns its text and length.
func scanQuoted(s string, q byte) (string, int, error) {
	// Without a doubled quote the value is s's substring: no copy.
	if j := strings.IndexByte(s[1:], q); j >= 0 && (2+j >= len(s) || s[2+j] != q) {
		return s[1 : 1+j], 2 + j, nil
	}
	var b strings.Builder
	i := 1
	for {
		j := strings.IndexByte(s[i:], q)
		if j < 0 {
			return "", 0, errUnterminated
		}
		b.WriteString(s[i : i+j])
		i += j + 1
		if i < len(s) && s[i] == q {
			b.WriteByte(q)
			i++
			continue
		}
		return b.String(), i, nil
	}
}

// scanEString decodes an E'…' string body; s starts at the quote. Escapes as
// PostgreSQL's: \b \f \n \r \t, \ooo octal, \xhh hex, \uXXXX and
// \UXXXXXXXX, any other \c is c; a doubled quote is one. A decoded NUL or invalid UTF-8
// is an error (PostgreSQL rejects both in a text value).
func scanEString(s string) (string, int, error) {
	var b []byte
	i := 1
	for {
		if i >= len(s) {
			return "", 0, errUnterminated
		}
		c := s[i]
		switch {
		case c == '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				b = append(b, '\'')
				i += 2
				continue
			}
			if !utf8.Valid(b) || strings.IndexByte(string(b), 0) >= 0 {
				return "", 0, errBadEscape
			}
			return string(b), i + 1, nil
		case c == '\\':
			if i+1 >= len(s) {
				return "", 0, errUnterminated
			}
			i++
			e := s[i]
			switch e {
			case 'b':
				b = append(b, '\b')
				i++
			case 'f':
				b = append(b, '\f')
				i++
			case 'n':
				b = append(b, '\n')
				i++
			case 'r':
				b = append(b, '\r')
				i++
			case 't':
				b = append(b, '\t')
				i++
			case '0', '1', '2', '3', '4', '5', '6', '7':
				v, n := 0, 0
				for n < 3 && i < len(s) && s[i] >= '0' && s[i] <= '7' {
					v = v*8 + int(s[i]-'0')
					i++
					n++
				}
				b = append(b, byte(v))
			case 'x':
				i++
				v, n := 0, 0
				for n < 2 && i < len(s) && hexVal(s[i]) >= 0 {
					v = v*16 + hexVal(s[i])
					i++
					n++
				}
				if n == 0 {
					// PostgreSQL reads "\x" without digits as "x".
					b = append(b, 'x')
					continue
				}
				b = append(b, byte(v))
			case 'u', 'U':
				n := 4
				if e == 'U' {
					n = 8
				}
				i++
				if i+n > len(s) {
					return "", 0, errBadEscape
				}
				v := 0
				for k := 0; k < n; k++ {
					h := hexVal(s[i+k])
					if h < 0 {
						return "", 0, errBadEscape
					}
					v = v*16 + h
				}
				i += n
				if v == 0 || v > utf8.MaxRune || v >= 0xD800 && v <= 0xDFFF {
					// Surrogate pairs are valid in PostgreSQL; refusing
					// them only means such a statement is forwarded.
					return "", 0, errBadEscape
				}
				b = utf8.AppendRune(b, rune(v))
			default:
				b = append(b, e)
				i++
			}
		default:
			b = append(b, c)
			i++
		}
	}
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// scanDollar reads a $tag$…$tag$ string at the start of s.
func scanDollar(s string) (string, int, error) {
	j := 1
	for j < len(s) && s[j] != '$' {
		if !isIdentCont(s[j]) || s[j] == '$' {
			return "", 0, fmt.Errorf("%w '$'", errBadChar)
		}
		j++
	}
	if j >= len(s) {
		return "", 0, errUnterminated
	}
	tag := s[:j+1]
	end := strings.Index(s[j+1:], tag)
	if end < 0 {
		return "", 0, errUnterminated
	}
	return s[j+1 : j+1+end], j + 1 + end + len(tag), nil
}

// Template is a statement a set may answer, recognised at start: a SELECT
// from the set's table whose WHERE clause is a conjunction with one
// conjunct "column = $k" on the set's column; other parameters, if any,
// are compared with other columns the same way.
type Template struct {
	// SQL is the statement as configured.
	SQL  string
	toks []token
	// param is the index in toks of the key's parameter; casts the tokens
	// of its cast ("::", type) that follow it, if any.
	param, casts int
	// key is the key's parameter number ($key), params how many there are.
	key, params int
	// at are the indexes in toks of every parameter.
	at []int
	// table is the FROM name, schema-qualified, as SQL.
	table string
}

// Table is the relation the statement reads, schema-qualified and quoted
// as SQL (for comparing it with the set's table on the database).
func (t *Template) Table() string { return t.table }

// Params is how many parameters the statement has; Key is the number of
// the key's ($1 is 1).
func (t *Template) Params() int { return t.params }

// Key is the number of the key's parameter ($1 is 1).
func (t *Template) Key() int { return t.key }

// maxParams bounds a template's parameters.
const maxParams = 16

// forbidden are words whose presence makes an absent key's answer other
// than "no rows", or its evaluation depend on more than the key: set
// operations, joins (an outer join keeps rows), row locks, CTEs (a data-
// modifying one writes), grouping, SELECT INTO (creates a table), OR and
// sub-selects. Function calls (aggregates, volatile functions) are refused
// by shape: a word followed by "(".
var forbidden = map[string]bool{
	"union": true, "intersect": true, "except": true, "join": true, "left": true, "right": true,
	"full": true, "outer": true, "cross": true, "natural": true, "lateral": true, "for": true,
	"with": true, "group": true, "having": true, "window": true, "over": true, "into": true,
	"or": true, "select": true, "tablesample": true, "on": true, "using": true, "only": true,
	"values": true, "returning": true, "rows": true, "fetch": true,
}

// notFunction are the words a "(" may follow that do not call a function.
var notFunction = map[string]bool{"where": true, "and": true, "not": true, "in": true, "is": true}

// textCasts are the casts allowed on the key's parameter: to text types
// without a length (a length would truncate the key).
var textCasts = map[string]bool{"text": true, "varchar": true}

// ParseTemplate checks that stmt has the shape a set may answer for its
// table and column (either may be schema-qualified or quoted as in SQL,
// compared as PostgreSQL would fold them), and returns it. The error says
// which part is refused.
func ParseTemplate(stmt, table, column string) (*Template, error) {
	toks, err := tokenize(stmt)
	if err != nil {
		return nil, err
	}
	for len(toks) > 0 && toks[len(toks)-1] == (token{kind: tokOp, val: ";"}) {
		toks = toks[:len(toks)-1]
	}
	if len(toks) == 0 || toks[0] != (token{kind: tokIdent, val: "select"}) {
		return nil, errors.New("not a SELECT")
	}
	tableName, err := splitName(table)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", table, err)
	}
	colName, err := splitName(column)
	if err != nil || len(colName) != 1 {
		return nil, fmt.Errorf("column %q: want one column name", column)
	}
	seen := map[int]bool{}
	var at []int
	for i, t := range toks {
		switch {
		case t.kind == tokIdent && i > 0 && forbidden[t.val]:
			return nil, fmt.Errorf("%q is not allowed (only a single-table SELECT whose WHERE is a conjunction)", strings.ToUpper(t.val))
		case t.kind == tokOp && t.val == "(" && i > 0 && (toks[i-1].kind == tokIdent && !notFunction[toks[i-1].val] || toks[i-1].kind == tokQIdent):
			return nil, fmt.Errorf("function call %s(…) is not allowed (aggregates and volatile functions change the answer for an absent key)", toks[i-1].val)
		case t.kind == tokOp && t.val == ";":
			return nil, errors.New("one statement only")
		case t.kind == tokParam:
			n, err := strconv.Atoi(t.val[1:])
			if err != nil || n < 1 || n > maxParams {
				return nil, fmt.Errorf("parameter %s: want $1 to $%d", t.val, maxParams)
			}
			if seen[n] {
				return nil, fmt.Errorf("parameter %s used twice", t.val)
			}
			seen[n] = true
			at = append(at, i)
		case t.kind == tokOp && strings.ContainsAny(t.val, "+-/%^|&~#@?") && t.val != "*":
			return nil, fmt.Errorf("operator %s is not allowed (an expression could fail at run time)", t.val)
		}
	}
	if len(at) == 0 {
		return nil, errors.New("no parameter: want the key as $1")
	}
	for n := 1; n <= len(at); n++ {
		if !seen[n] {
			return nil, fmt.Errorf("parameters must be $1 to $%d: $%d is missing", len(at), n)
		}
	}
	from := indexWord(toks, "from")
	if from < 0 {
		return nil, errors.New("no FROM")
	}
	if indexWord(toks[from+1:], "from") >= 0 {
		return nil, errors.New("FROM twice")
	}
	// FROM table [[AS] alias] WHERE
	i := from + 1
	name, n := readName(toks[i:])
	if n == 0 {
		return nil, errors.New("FROM: want a table name")
	}
	if !sameName(name, tableName) {
		return nil, fmt.Errorf("FROM %s: not the set's table %s", strings.Join(name, "."), table)
	}
	// An unqualified name (or one in pg_temp, the session's own temporary
	// schema) means what each session's search_path makes it: a schema
	// named after the role, a path set by ALTER ROLE or inside a function,
	// a temporary table. The front end cannot see all of them.
	if len(name) < 2 || strings.HasPrefix(name[len(name)-2], "pg_temp") {
		schema := "public"
		if len(tableName) >= 2 && !strings.HasPrefix(tableName[len(tableName)-2], "pg_temp") {
			schema = quoteIdent(tableName[len(tableName)-2])
		}
		return nil, fmt.Errorf("FROM %s: name the table with its schema (FROM %s.%s): an unqualified name means what each session's search_path makes it",
			quoteName(name), schema, quoteIdent(name[len(name)-1]))
	}
	i += n
	quals := [][]string{name, name[len(name)-1:]}
	if i < len(toks) && toks[i] == (token{kind: tokIdent, val: "as"}) {
		i++
	}
	if i < len(toks) && (toks[i].kind == tokQIdent || toks[i].kind == tokIdent && toks[i].val != "where") {
		quals = [][]string{{toks[i].val}}
		i++
	}
	if i >= len(toks) || toks[i] != (token{kind: tokIdent, val: "where"}) {
		return nil, errors.New("FROM: want one table, then WHERE")
	}
	i++
	// The WHERE clause runs to ORDER, LIMIT or OFFSET at depth 0.
	end := len(toks)
	depth := 0
	for j := i; j < len(toks); j++ {
		switch t := toks[j]; {
		case t.kind == tokOp && t.val == "(":
			depth++
		case t.kind == tokOp && t.val == ")":
			depth--
			if depth < 0 {
				return nil, errors.New("unbalanced parentheses")
			}
		case depth == 0 && t.kind == tokIdent && (t.val == "order" || t.val == "limit" || t.val == "offset"):
			if end == len(toks) {
				end = j
			}
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced parentheses")
	}
	if err := checkTail(toks[end:]); err != nil {
		return nil, err
	}
	tp := &Template{SQL: stmt, toks: toks, param: -1, params: len(at), at: at, table: qualified(name)}
	inConjunct := 0 // parameters compared with a column in a conjunct
	// Conjuncts at depth 0, split on AND.
	start := i
	depth = 0
	for j := i; j <= end; j++ {
		if j < end {
			t := toks[j]
			if t.kind == tokOp && t.val == "(" {
				depth++
			} else if t.kind == tokOp && t.val == ")" {
				depth--
			}
			if !(depth == 0 && t == (token{kind: tokIdent, val: "and"})) {
				continue
			}
			if between(toks, start, j) {
				return nil, errors.New("BETWEEN is not allowed")
			}
		}
		if p, casts, ok := keyConjunct(toks[start:j], quals, colName[0]); ok && tp.param < 0 {
			tp.param, tp.casts = start+p, casts
			inConjunct++
		} else if _, _, ok := keyConjunct(toks[start:j], quals, ""); ok {
			inConjunct++ // another column compared with a parameter
		}
		start = j + 1
	}
	if tp.param < 0 {
		return nil, fmt.Errorf("WHERE: want a conjunct %s = $1 (the bare column, compared with the bare parameter) joined to the others by AND", column)
	}
	if inConjunct != len(at) {
		return nil, errors.New("a parameter other than the key's must be compared with a bare column (column = $n) in a conjunct of its own: elsewhere its value could change the answer or fail")
	}
	tp.key, _ = strconv.Atoi(toks[tp.param].val[1:])
	return tp, nil
}

func between(toks []token, from, to int) bool {
	for _, t := range toks[from:to] {
		if t == (token{kind: tokIdent, val: "between"}) {
			return true
		}
	}
	return false
}

// checkTail allows ORDER BY names, LIMIT n|ALL and OFFSET n.
func checkTail(toks []token) error {
	for _, t := range toks {
		switch t.kind {
		case tokIdent, tokQIdent, tokNumber:
		case tokOp:
			if t.val != "," && t.val != "." {
				return fmt.Errorf("ORDER BY/LIMIT/OFFSET: %q is not allowed", t.val)
			}
		default:
			return errors.New("ORDER BY/LIMIT/OFFSET: only names and numbers are allowed")
		}
	}
	return nil
}

// keyConjunct reports whether c is "[qual.]column = $n[::text]" or its
// mirror (any column when column is ""), and where $n is in c.
func keyConjunct(c []token, quals [][]string, column string) (param, casts int, ok bool) {
	colAt := func(c []token) int {
		name, n := readName(c)
		if n == 0 {
			return 0
		}
		if column != "" && name[len(name)-1] != column {
			return 0
		}
		if q := name[:len(name)-1]; len(q) > 0 {
			match := false
			for _, want := range quals {
				if sameName(q, want) {
					match = true
				}
			}
			if !match {
				return 0
			}
		}
		return n
	}
	paramAt := func(c []token) (int, int) {
		if len(c) == 0 || c[0].kind != tokParam {
			return 0, 0
		}
		if len(c) >= 3 && c[1] == (token{kind: tokOp, val: "::"}) && c[2].kind == tokIdent && textCasts[c[2].val] {
			return 3, 2
		}
		return 1, 0
	}
	eq := token{kind: tokOp, val: "="}
	if n := colAt(c); n > 0 && n < len(c) && c[n] == eq {
		if m, casts := paramAt(c[n+1:]); m > 0 && n+1+m == len(c) {
			return n + 1, casts, true
		}
	}
	if m, casts := paramAt(c); m > 0 && m < len(c) && c[m] == eq {
		if n := colAt(c[m+1:]); n > 0 && m+1+n == len(c) {
			return 0, casts, true
		}
	}
	return 0, 0, false
}

// readName reads a possibly qualified name: ident(.ident)*.
func readName(toks []token) ([]string, int) {
	var name []string
	i := 0
	for {
		if i >= len(toks) || toks[i].kind != tokIdent && toks[i].kind != tokQIdent {
			return nil, 0
		}
		name = append(name, toks[i].val)
		i++
		if i+1 < len(toks) && toks[i] == (token{kind: tokOp, val: "."}) {
			i++
			continue
		}
		return name, i
	}
}

// quoteIdent quotes a folded name part unless it reads the same unquoted
// (lower case letters, digits and _, not a keyword), for messages.
func quoteIdent(s string) string {
	_, kw := keywords[s]
	plain := s != "" && !kw && (s[0] == '_' || s[0] >= 'a' && s[0] <= 'z')
	for i := 0; plain && i < len(s); i++ {
		c := s[i]
		plain = c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
	}
	if plain {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// quoteName is name as SQL, each part quoted where needed, for messages.
func quoteName(name []string) string {
	parts := make([]string, len(name))
	for i, p := range name {
		parts[i] = quoteIdent(p)
	}
	return strings.Join(parts, ".")
}

// qualified is name as SQL, each part quoted.
func qualified(name []string) string {
	parts := make([]string, len(name))
	for i, p := range name {
		parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
	}
	return strings.Join(parts, ".")
}

// splitName tokenizes a configured table or column name.
func splitName(s string) ([]string, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	name, n := readName(toks)
	if n == 0 || n != len(toks) {
		return nil, errors.New("not a name")
	}
	return name, nil
}

// sameName compares names as PostgreSQL resolves them here: equal, or one
// unqualified and equal to the other's last part (resolved through the
// search path; see the package doc).
func sameName(a, b []string) bool {
	if len(a) == len(b) {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if len(a) == 1 || len(b) == 1 {
		return a[len(a)-1] == b[len(b)-1]
	}
	return false
}

func indexWord(toks []token, w string) int {
	for i, t := range toks {
		if t.kind == tokIdent && t.val == w {
			return i
		}
	}
	return -1
}

// Literal is how a client's statement supplied the key.
type matchKind uint8

const (
	matchNone   matchKind = iota
	matchParam            // $1, in a Parse
	matchString           // a '' string literal: depends on standard_conforming_strings
	matchEscape           // an E'' or $$ string literal
)

// match compares a client's statement with t token for token. On the
// extended protocol (literal false) the statement must be t itself; on the
// simple protocol the key's $1 must be a string literal, whose decoded
// value is returned.
func (t *Template) match(toks []token, literal bool) (key string, kind matchKind) {
	for len(toks) > 0 && toks[len(toks)-1] == (token{kind: tokOp, val: ";"}) {
		toks = toks[:len(toks)-1]
	}
	if len(toks) != len(t.toks) {
		return "", matchNone
	}
	kind = matchParam
	if literal {
		kind = matchEscape
	}
	next := 0 // the next parameter in t.at
	for i, want := range t.toks {
		got := toks[i]
		if literal && next < len(t.at) && i == t.at[next] {
			next++
			if got.kind != tokString {
				return "", matchNone
			}
			if !got.escape {
				kind = matchString // depends on standard_conforming_strings
			}
			if i == t.param {
				key = got.val
			} else if !validKey([]byte(got.val)) {
				return "", matchNone // PostgreSQL's error, not "no row"
			}
			continue
		}
		if got != want {
			return "", matchNone
		}
	}
	if !literal {
		return "", matchParam
	}
	return key, kind
}
