//go:build race

package resp

// raceEnabled: under the race detector sync.Pool drops some of what it is
// given back, so counts of allocations that rely on a pool do not hold.
const raceEnabled = true
