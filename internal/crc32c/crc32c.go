// Package crc32c is the CRC-32C (Castagnoli) checksum every bloomgate format
// uses: filter frames, gate snapshots, fan-out batches, and serve's log and
// snapshot. One table, built once; the functions are safe for concurrent use.
package crc32c

import (
	"hash"
	"hash/crc32"
)

// Table is the Castagnoli table.
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Table) }

// Update returns crc updated with b.
func Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }

// New returns a hash.Hash32 computing the CRC-32C.
func New() hash.Hash32 { return crc32.New(Table) }
