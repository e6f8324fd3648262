package bloomgate

import (
	"bytes"
	"unicode/utf8"
)

// Normalizer maps a key to the form stored in the filter. The gate applies the
// same Normalizer on every path (warm-up, lookups, adds, removes), so a key
// normalised differently by the application still finds its row.
//
// The zero value is Exact.
type Normalizer struct {
	kind int
	fn   func(dst, key []byte) []byte
}

var (
	// Exact uses keys as they are.
	Exact = Normalizer{}
	// LowerTrim trims leading and trailing white space and lower-cases the key
	// (Unicode), like the articles' email.strip().lower(). Invalid UTF-8
	// bytes become U+FFFD, the same on every path.
	LowerTrim = Normalizer{kind: 1}
)

// CustomNormalizer returns a Normalizer that calls fn, which must append the
// normalised form of key to dst and return it, and must be deterministic.
// Lookups through a custom normaliser may allocate; the built-ins do not for
// keys up to 256 bytes.
func CustomNormalizer(fn func(dst, key []byte) []byte) Normalizer {
	return Normalizer{kind: 2, fn: fn}
}

// Append appends the normalised key to dst.
func (n Normalizer) Append(dst, key []byte) []byte {
	if n.fn != nil {
		return n.fn(dst, key)
	}
	return n.appendBuiltin(dst, key)
}

// appendBuiltin is Append for Exact and LowerTrim. Calling it directly, not
// through a function value, keeps a stack buffer passed as dst on the stack.
func (n Normalizer) appendBuiltin(dst, key []byte) []byte {
	if n.kind == 1 {
		return appendLowerTrim(dst, key)
	}
	return append(dst, key...)
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
