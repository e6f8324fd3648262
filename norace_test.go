//go:build !race

package bloomgate_test

const raceEnabled = false
