package bloomgate

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// Normalizer maps a key to the form stored in the filter. The gate applies the
// same Normalizer on every path (builds, lookups, adds, removes), so a key
// written differently by the application still finds its row.
//
// The zero value is Exact.
type Normalizer struct {
	kind normKind
	fn   func(dst, key []byte) []byte
}

type normKind uint8

const (
	normExact normKind = iota
	normLowerTrim
	normCustom
)

var (
	// Exact uses keys as they are.
	Exact = Normalizer{kind: normExact}
	// LowerTrim trims leading and trailing white space and lower-cases the key
	// (Unicode), like Python's email.strip().lower(). Invalid UTF-8 bytes
	// become U+FFFD, the same on every path.
	LowerTrim = Normalizer{kind: normLowerTrim}
)

// CustomNormalizer returns a Normalizer that calls fn, which must append the
// normalised form of key to dst and return the result, and must be
// deterministic. fn gets a private copy of the key, so it may modify it.
// Lookups through a custom normaliser allocate; the built-ins do not for keys
// up to 256 bytes.
func CustomNormalizer(fn func(dst, key []byte) []byte) Normalizer {
	return Normalizer{kind: normCustom, fn: fn}
}

// Append appends the normalised key to dst.
func (n Normalizer) Append(dst, key []byte) []byte {
	if n.kind == normCustom {
		return n.fn(dst, slices.Clone(key))
	}
	return n.appendBuiltin(dst, key)
}

// appendBuiltin is Append for Exact and LowerTrim. Calling it directly, not
// through a function value, keeps a stack buffer passed as dst on the stack.
func (n Normalizer) appendBuiltin(dst, key []byte) []byte {
	if n.kind == normLowerTrim {
		return appendLowerTrim(dst, key)
	}
	return append(dst, key...)
}

// normalize returns the normalised key, in buf when a built-in normaliser's
// result fits, and whether it is at most maxLen bytes long. Exact returns key
// itself. The result is only read (hashed), never kept.
func (n Normalizer) normalize(buf *[256]byte, key []byte, maxLen int) ([]byte, bool) {
	var nk []byte
	switch n.kind {
	case normExact:
		nk = key
	case normCustom:
		nk = n.fn(nil, slices.Clone(key))
	default:
		nk = n.appendBuiltin(buf[:0], key)
	}
	return nk, len(nk) <= maxLen
}

func appendLowerTrim(dst, key []byte) []byte {
	key = bytes.TrimSpace(key)
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return append(dst, bytes.ToLower(key)...)
		}
	}
	for _, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}
