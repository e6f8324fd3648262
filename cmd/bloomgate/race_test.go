//go:build race

package main

// raceEnabled: the race detector slows the servers' decoding and applying
// several times over, beside the other packages' tests on the same cores.
const raceEnabled = true
