package bloomgate

import "unsafe"

// stringBytes views s as a byte slice without copying. The slice must not be
// written to; every use here only reads or hashes it.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
