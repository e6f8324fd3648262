package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/bloomgate/bloomgate/serve"
)

const serveCheckUsage = `usage: bloomgate serve check [-data DIR] [-repair]

Checks the snapshots and the log of a stopped server's data directory, as
redis-check-aof does, and reports what a start would find: each file ok,
an incomplete last record (truncated at start: it was never acknowledged),
or damage (a start stops there). With -repair it makes the directory
startable: damaged log records are removed (the whole records after them
are kept), a damaged snapshot is moved aside so the start falls back to the
one before it (or to the log alone); a copy of every file it changes or
moves goes to DIR/repair-<time> first. Exit status: 0 when a start loses
nothing (or after a repair), 1 when damage was found and not repaired.

flags:
`

func runServeCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve check", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveCheckUsage)
		fs.PrintDefaults()
	}
	dir := fs.String("data", "./bloomgate-data", "the server's data `directory`")
	repair := fs.Bool("repair", false, "repair what a start would stop at, keeping a copy of every file changed")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	rep, err := serve.Check(*dir, *repair, 0)
	if err != nil {
		if errors.Is(err, serve.ErrDataDirLocked) {
			fmt.Fprintf(stderr, "bloomgate serve check: %v: stop the server first\n", err)
		} else {
			fmt.Fprintf(stderr, "bloomgate serve check: %v\n", err)
		}
		return exitError
	}
	rep.WriteTo(stdout)
	if !rep.OK() && rep.Backup == "" {
		fmt.Fprintln(stdout, "damage found: run again with -repair to make the directory startable (the lost writes are those named above), or restore it from a backup")
		return exitError
	}
	return exitOK
}
