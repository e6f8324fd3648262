package bloomgate

import "context"

// Source streams the keys of the table a Gate guards. source/postgres and
// source/sqlite implement it.
type Source interface {
	// Scan calls fn once for every key, in any order. The slice is valid
	// only during the call. Scan stops and returns fn's error, or ctx's
	// error when ctx is done. A Scan that returns nil has delivered every key
	// that was committed when it started.
	Scan(ctx context.Context, fn func(key []byte) error) error
	// Estimate returns the approximate number of keys, or 0 if unknown. It
	// sizes the filter and scales the progress report.
	Estimate(ctx context.Context) (int64, error)
}

// Progress reports a build in progress.
type Progress struct {
	Keys     int64 // keys read so far
	Estimate int64 // Source.Estimate at the start, 0 if unknown
	Done     bool  // the build finished (successfully or not)
}
