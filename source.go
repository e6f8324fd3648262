package bloomgate

import "github.com/bloomgate/bloomgate/changefeed"

// Source streams the keys of the table a Gate guards (changefeed.Source).
type Source = changefeed.Source

// Progress reports a build in progress.
type Progress struct {
	Keys     int64 // keys read so far
	Estimate int64 // Source.Estimate at the start, 0 if unknown
	Done     bool  // the build finished (successfully or not)
}
