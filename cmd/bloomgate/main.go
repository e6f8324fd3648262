// Command bloomgate sizes filters, runs the gate demo, sets up the PostgreSQL
// change feed and serves filters.
//
//	bloomgate size -n 10000000 -p 0.001
//	bloomgate demo
//	bloomgate feed setup -postgres URL -table users -column email
//	bloomgate serve -config bloomgate.conf
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/bloomgate/bloomgate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
