// Package version says which bloomgate build is running, for
// `bloomgate version`, the server's INFO reply and its metrics.
package version

import (
	"runtime/debug"
	"strings"
	"sync"
)

// release is set at link time for a release build:
//
//	go build -ldflags "-X github.com/bloomgate/bloomgate/internal/version.release=v1.2.3" ./cmd/bloomgate
//
// Otherwise String reports the module version the go command recorded
// (a tagged module fetched by version), or "devel".
var release string

var (
	once   sync.Once
	cached Info
)

// Info describes the build.
type Info struct {
	// Version is the release ("v1.2.3"), or "devel" for a build from a work
	// tree.
	Version string
	// Revision is the VCS commit the binary was built from, with
	// "-dirty" when the work tree had changes ("" when unknown).
	Revision string
	// GoVersion is the Go toolchain that built it.
	GoVersion string
}

// Get returns the build's Info.
func Get() Info {
	once.Do(func() {
		cached = Info{Version: "devel"}
		bi, ok := debug.ReadBuildInfo()
		if ok {
			cached.GoVersion = bi.GoVersion
			if v := bi.Main.Version; v != "" && v != "(devel)" {
				cached.Version = v
			}
			var dirty bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					cached.Revision = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if dirty && cached.Revision != "" {
				cached.Revision += "-dirty"
			}
		}
		if release != "" {
			cached.Version = release
		}
	})
	return cached
}

// String returns the version, with the revision when known:
// "devel (3f2c1a9e07bd-dirty)".
func String() string {
	i := Get()
	if i.Revision == "" {
		return i.Version
	}
	rev, dirty := strings.CutSuffix(i.Revision, "-dirty")
	rev = rev[:min(len(rev), 12)]
	if dirty {
		rev += "-dirty"
	}
	return i.Version + " (" + rev + ")"
}
