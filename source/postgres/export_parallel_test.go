package postgres

// SetAfterExport sets the hook ScanParts runs once its snapshot is exported.
func SetAfterExport(fn func()) { afterExport = fn }
