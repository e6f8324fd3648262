// Command bloomgate sizes filters and runs the gate demo.
//
//	bloomgate size -n 10000000 -p 0.001
//	bloomgate demo
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
