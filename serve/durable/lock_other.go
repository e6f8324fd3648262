//go:build !unix

package durable

import (
	"os"
	"path/filepath"
)

// lockDir creates the LOCK file; only unix systems also lock it.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
}
