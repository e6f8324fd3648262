//go:build race

package filter_test

// raceEnabled is true under the race detector, which makes the heaviest
// tests use fewer keys.
const raceEnabled = true
