// Command bloomgate sizes filters, runs the gate demo and sets up the
// PostgreSQL change feed.
//
//	bloomgate size -n 10000000 -p 0.001
//	bloomgate demo
//	bloomgate feed setup -postgres URL -table users -column email
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/bloomgate/bloomgate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
