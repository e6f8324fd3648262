//go:build race

package filter_test

// underRace is true when the race detector is on; tests shrink their sizes.
const underRace = true
