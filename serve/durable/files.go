package durable

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The names of a data directory's files (see the package doc).
const (
	segmentPrefix      = "log-"
	segmentSuffix      = ".aof"
	legacySnapshotName = "snapshot.bgs"
	snapshotPrefix     = "snapshot-"
	snapshotSuffix     = ".bgs"
	snapshotMagic      = "BGSNAP01"
	// damagedSuffix is added to a snapshot that failed its checks once a
	// start has fallen back past it, so it is kept for inspection but never
	// read again.
	damagedSuffix = ".damaged"
)

func segmentName(seg uint64) string {
	return fmt.Sprintf("%s%016d%s", segmentPrefix, seg, segmentSuffix)
}

func snapshotFile(seg uint64) string {
	return fmt.Sprintf("%s%016d%s", snapshotPrefix, seg, snapshotSuffix)
}

// listNumbered returns the n of the files prefix<n>suffix in dir, ascending.
func listNumbered(dir, prefix, suffix string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		n, ok = strings.CutSuffix(n, suffix)
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(n, 10, 64); err == nil {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// listSegments returns the segment numbers in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	return listNumbered(dir, segmentPrefix, segmentSuffix)
}

// snapshotGen is one snapshot file: it covers the log before segment seg.
type snapshotGen struct {
	name string
	seg  uint64
}

// snapshotGens lists the snapshots in dir, newest first.
func snapshotGens(dir string) ([]snapshotGen, error) {
	nums, err := listNumbered(dir, snapshotPrefix, snapshotSuffix)
	if err != nil {
		return nil, err
	}
	var gens []snapshotGen
	for i := len(nums) - 1; i >= 0; i-- {
		gens = append(gens, snapshotGen{snapshotFile(nums[i]), nums[i]})
	}
	if _, err := os.Stat(filepath.Join(dir, legacySnapshotName)); err == nil {
		gens = append(gens, snapshotGen{legacySnapshotName, 0})
	}
	return gens, nil
}

// Segments returns the paths of the log segments in dir, oldest first.
func Segments(dir string) ([]string, error) {
	segs, err := listSegments(dir)
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = filepath.Join(dir, segmentName(s))
	}
	return out, err
}

// Snapshots returns the paths of the snapshots in dir, newest first.
func Snapshots(dir string) ([]string, error) {
	gens, err := snapshotGens(dir)
	out := make([]string, len(gens))
	for i, g := range gens {
		out[i] = filepath.Join(dir, g.name)
	}
	return out, err
}

// openSized opens the file at path with flag and returns it with its size.
func openSized(path string, flag int) (*os.File, int64, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}
