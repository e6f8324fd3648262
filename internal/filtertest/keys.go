// Package filtertest holds the conformance suite every bloomgate filter
// passes, and the key generators its tests and benchmarks share.
package filtertest

import (
	"math/rand/v2"
	"strconv"
)

var domains = []string{"gmail.com", "yahoo.com", "outlook.com", "example.org", "mail.ru", "web.de", "proton.me", "icloud.com"}

// Emails returns n distinct e-mail-like keys. Keys from different namespaces
// never collide, so Emails(n, 1) and Emails(m, 2) are disjoint: use one
// namespace for present keys and another for absent ones.
func Emails(n int, namespace uint64) [][]byte {
	r := rand.New(rand.NewPCG(namespace, 0x5eed))
	out := make([][]byte, n)
	buf := make([]byte, 0, 40*n)
	for i := range n {
		start := len(buf)
		buf = append(buf, "user."...)
		buf = strconv.AppendUint(buf, r.Uint64()%1e6, 36)
		buf = append(buf, '.')
		buf = strconv.AppendUint(buf, namespace, 36)
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, int64(i), 36)
		buf = append(buf, '@')
		buf = append(buf, domains[r.IntN(len(domains))]...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}
