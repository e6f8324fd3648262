//go:build race

package bloomgate_test

// raceEnabled scales stress tests down under the race detector, which slows
// them about tenfold.
const raceEnabled = true
