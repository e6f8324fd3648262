// Package durabletest holds what tests of a durable data directory share:
// a file system that fails on demand (a full disk, a failed fsync) and
// ways to damage files.
package durabletest

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/bloomgate/bloomgate/serve/durable"
)

// FaultFS creates real segment files whose writes fail with ENOSPC while
// Full is set, after writing part of the record (as a disk that fills up
// in the middle of a write does), whose fsyncs fail with EIO while
// SyncFails is set, and fails to create them with EIO while CreateFails is
// set.
type FaultFS struct {
	Full, SyncFails, CreateFails atomic.Bool
}

var _ durable.FS = (*FaultFS)(nil)

type faultFile struct {
	*os.File
	fs *FaultFS
}

// Create creates path as durable.OSFS does, unless CreateFails is set.
func (fs *FaultFS) Create(path string) (durable.File, error) {
	if fs.CreateFails.Load() {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EIO}
	}
	f, err := durable.OSFS{}.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{f.(*os.File), fs}, nil
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.fs.Full.Load() {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if f.fs.SyncFails.Load() {
		return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.Sync()
}

// FlipByte flips a bit of the byte at offset off of the file at path.
func FlipByte(t testing.TB, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off] ^= 0x20
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// AppendFile appends b to the file at path.
func AppendFile(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}
