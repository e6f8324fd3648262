// Package defaults fills a config struct's zero fields with their defaults,
// the rule every bloomgate Config follows: the zero value means the default.
package defaults

// Set sets *v to def when *v is the zero value of T.
func Set[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
