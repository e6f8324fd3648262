// Package crc32c is the CRC-32C (Castagnoli) checksum every bloomgate format
// uses: filter frames, gate snapshots, fan-out batches, and serve's log and
// snapshot. One table, built once; the functions are safe for concurrent use.
package crc32c

import (
	"hash"
	"hash/crc32"
	"io"
)

// Table is the Castagnoli table.
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Table) }

// Update returns crc updated with b.
func Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }

// New returns a hash.Hash32 computing the CRC-32C.
func New() hash.Hash32 { return crc32.New(Table) }

// Reader checksums what is read through it.
type Reader struct {
	R   io.Reader // the reader under it; read R directly for bytes not to checksum
	crc uint32
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader { return &Reader{R: r} }

func (c *Reader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.crc = Update(c.crc, p[:n])
	return n, err
}

// Sum32 returns the CRC-32C of the bytes read so far.
func (c *Reader) Sum32() uint32 { return c.crc }

// Len reports the bytes left when the reader under it does (-1 when
// unknown), so a decoder can allocate at once rather than grow as it reads.
func (c *Reader) Len() int {
	if l, ok := c.R.(interface{ Len() int }); ok {
		return l.Len()
	}
	return -1
}
