//go:build race

package postgres_test

// raceEnabled: the race detector slows decoding about tenfold, so the
// growth test writes fewer rows.
const raceEnabled = true
