package sqlite_test

import "os"

// exampleDir is a fresh directory for the example's database.
func exampleDir() string {
	d, err := os.MkdirTemp("", "bloomgate-example")
	if err != nil {
		panic(err)
	}
	return d
}
