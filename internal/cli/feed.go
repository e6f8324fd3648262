package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/bloomgate/bloomgate/source/postgres"
)

func runFeed(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprintln(stderr, "usage: bloomgate feed <setup|status> [flags]\n\n"+
			"  setup   print (or with -run, run) the SQL the PostgreSQL change feed needs, and check wal_level\n"+
			"  status  print the feed's replication slot: position, WAL retained, wal_status")
	}
	if len(args) == 0 {
		usage()
		return exitUsage
	}
	switch args[0] {
	case "setup":
		return runFeedSetup(ctx, args[1:], stdout, stderr)
	case "status":
		return runFeedStatus(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage()
		return exitOK
	}
	fmt.Fprintf(stderr, "bloomgate feed: unknown subcommand %q\n", args[0])
	usage()
	return exitUsage
}

// feedFlags registers the flags that name a feed and returns a builder for
// its config.
func feedFlags(fs *flag.FlagSet) func() (postgres.FeedConfig, error) {
	url := fs.String("postgres", os.Getenv("BLOOMGATE_POSTGRES_URL"), "PostgreSQL connection URL (default $BLOOMGATE_POSTGRES_URL)")
	table := fs.String("table", "", "table holding the keys, optionally schema-qualified (required)")
	column := fs.String("column", "", "key column (required)")
	slot := fs.String("slot", "", "replication slot name (default bloomgate_<schema>_<table>_<column>, e.g. bloomgate_public_users_email)")
	pub := fs.String("publication", "", "publication name (default: the slot's name, -slot's when given)")
	timeout := fs.Duration("timeout", postgres.DefaultTimeout, "bound on each connection attempt and query")
	return func() (postgres.FeedConfig, error) {
		if *url == "" || *table == "" || *column == "" {
			return postgres.FeedConfig{}, errors.New("-postgres, -table and -column are required")
		}
		if *timeout <= 0 {
			return postgres.FeedConfig{}, errors.New("-timeout must be positive")
		}
		return postgres.FeedConfig{ConnString: *url, Table: *table, Column: *column, Slot: *slot, Publication: *pub, Timeout: *timeout}, nil
	}
}

func runFeedSetup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("feed setup", flag.ContinueOnError)
	config := feedFlags(fs)
	role := fs.String("role", "bloomgate", "role the feed connects as (empty: no role statements)")
	run := fs.Bool("run", false, "run the statements instead of only printing them")
	identity := fs.String("identity", "", "replica identity for a table that has no usable one: full, index, index=NAME or inserts (default: leave it, and refuse if the application's UPDATE/DELETE would break)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bloomgate feed setup -postgres URL -table T -column C [-role R] [-identity I] [-run]\n\n"+
			"Prints the SQL that lets bloomgate follow a table through logical replication: a publication\n"+
			"(no row filter), a role with REPLICATION and SELECT, and replica identity advice. Checks\n"+
			"wal_level and exits 1 when it is not logical. A table without a primary key needs a choice\n"+
			"(-identity): setup never makes PostgreSQL refuse the application's UPDATE or DELETE.")
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	var opts postgres.SetupOptions
	cfg, err := config()
	if err == nil {
		opts.Identity, opts.Index, err = parseIdentity(*identity)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate feed setup: %v\n", err)
		fs.Usage()
		return exitUsage
	}
	f, err := postgres.NewFeed(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate feed setup: %v\n", err)
		return exitUsage
	}
	defer f.Close()
	opts.Role = *role
	plan, err := f.Setup(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate feed setup: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "-- bloomgate change feed for %s.%s: slot %s, publication %s\n", cfg.Table, cfg.Column, f.Slot(), f.Publication())
	fmt.Fprintf(stdout, "-- wal_level: %s\n", plan.WALLevel)
	if plan.CheckWALLevel() != nil {
		fmt.Fprintln(stdout, "ALTER SYSTEM SET wal_level = logical; -- then restart PostgreSQL")
	}
	if len(plan.Statements) == 0 {
		fmt.Fprintln(stdout, "-- publication and role are already in place")
	}
	for _, s := range plan.Statements {
		fmt.Fprintln(stdout, s+";")
	}
	for _, n := range plan.Notes {
		fmt.Fprintln(stdout, "-- "+strings.ReplaceAll(n, "\n", "\n-- "))
	}
	if *run {
		if err := f.ApplySetup(ctx, plan); err != nil {
			fmt.Fprintf(stderr, "bloomgate feed setup: %v\n", err)
			return exitError
		}
		fmt.Fprintf(stdout, "-- ran %d statements\n", len(plan.Statements))
	}
	if err := plan.CheckWALLevel(); err != nil {
		fmt.Fprintf(stderr, "bloomgate feed setup: %v\n", err)
		return exitError
	}
	return exitOK
}

func runFeedStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("feed status", flag.ContinueOnError)
	config := feedFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bloomgate feed status -postgres URL -table T -column C [-slot S]")
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	cfg, err := config()
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate feed status: %v\n", err)
		fs.Usage()
		return exitUsage
	}
	f, err := postgres.NewFeed(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate feed status: %v\n", err)
		return exitUsage
	}
	defer f.Close()
	st, err := f.SlotStatus(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate feed status: %v\n", err)
		return exitError
	}
	if !st.Exists {
		fmt.Fprintf(stdout, "slot %s does not exist (no feed bootstrapped, or it was dropped)\n", f.Slot())
		return exitError
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "slot\t%s\n", f.Slot())
	fmt.Fprintf(tw, "active\t%v\n", st.Active)
	fmt.Fprintf(tw, "wal_status\t%s\n", st.WALStatus)
	fmt.Fprintf(tw, "confirmed_flush_lsn\t%s\n", postgres.FormatLSN(st.ConfirmedFlush))
	fmt.Fprintf(tw, "restart_lsn\t%s\n", postgres.FormatLSN(st.RestartLSN))
	fmt.Fprintf(tw, "retained WAL\t%d bytes (%s)\n", st.RetainedBytes, humanBytes(uint64(max(st.RetainedBytes, 0))))
	if st.SafeWALSize >= 0 {
		fmt.Fprintf(tw, "safe_wal_size\t%d bytes\n", st.SafeWALSize)
	} else {
		fmt.Fprintf(tw, "safe_wal_size\tunlimited (max_slot_wal_keep_size = -1)\n")
	}
	tw.Flush()
	if st.WALStatus == "lost" {
		fmt.Fprintln(stderr, "bloomgate feed status: the slot is lost; the gate must bootstrap again")
		return exitError
	}
	return exitOK
}

// parseIdentity reads the -identity flag.
func parseIdentity(s string) (postgres.Identity, string, error) {
	name, index, _ := strings.Cut(s, "=")
	switch {
	case s == "":
		return postgres.IdentityUnchanged, "", nil
	case s == "full":
		return postgres.IdentityFull, "", nil
	case s == "inserts":
		return postgres.IdentityInsertsOnly, "", nil
	case name == "index":
		return postgres.IdentityIndex, index, nil
	}
	return 0, "", fmt.Errorf("-identity %q: want full, index, index=NAME or inserts", s)
}
