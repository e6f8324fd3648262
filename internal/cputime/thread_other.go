//go:build !linux

package cputime

// Thread reports false: thread CPU time is read only on Linux.
func Thread() (int64, bool) { return 0, false }
