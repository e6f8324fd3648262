package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/bloomgate/bloomgate/internal/version"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/server"
)

const serveUsage = `usage: bloomgate serve [-config FILE] [-resp ADDR] [-http ADDR] [-data DIR] [-requirepass PASSWORD] [-appendfsync POLICY]
       bloomgate serve check [-data DIR] [-repair]

Serves filters over the Redis protocol (RedisBloom's BF.* and CF.* commands,
plus BG.EXISTS, BF.EXISTSAT/BG.EXISTSAT for read-your-writes, and BG.X* for
items that expire) and over HTTP (JSON under /v1, /metrics, /healthz,
/readyz). With no config file it serves standalone filters; the config file
declares table-backed sets, which follow PostgreSQL's change feed by default
and may fan out over NATS JetStream or a Redis stream (docs/serve.md
describes its format).

The password also comes from the environment variable BLOOMGATE_PASSWORD.
Flags override the environment, which overrides the config file. Binding a
non-loopback address without a password refuses to start (protected mode).
SIGTERM or SIGINT: stop accepting, finish in-flight commands, snapshot, exit 0.

flags:
`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return runServeCheck(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "config `file` declaring settings and table-backed sets")
	respAddr := fs.String("resp", "127.0.0.1:6380", "Redis protocol listen `address` (\"\" disables it)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "HTTP listen `address` (\"\" disables it)")
	dataDir := fs.String("data", "./bloomgate-data", "`directory` for the snapshot and the log (\"\" keeps filters in memory only)")
	password := fs.String("requirepass", "", "`password` for AUTH and the HTTP bearer token")
	fsync := fs.String("appendfsync", "everysec", "log fsync `policy`: always, everysec or no")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	file := &server.ConfigFile{}
	if *configPath != "" {
		fh, err := os.Open(*configPath)
		if err != nil {
			fmt.Fprintf(stderr, "bloomgate serve: %v\n", err)
			return exitError
		}
		file, err = server.ParseConfig(fh)
		fh.Close()
		if err != nil {
			fmt.Fprintf(stderr, "bloomgate serve: %s: %v\n", *configPath, err)
			return exitError
		}
	}
	cfg := mergeServeFlags(file, set, *respAddr, *httpAddr, *dataDir, *fsync)
	if pw := os.Getenv("BLOOMGATE_PASSWORD"); pw != "" {
		cfg.Password = pw
	}
	if set["requirepass"] {
		cfg.Password = *password
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	if err := serveMain(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "bloomgate serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// mergeServeFlags lets explicitly given flags override the file, and fills
// what the file leaves out from the flags' defaults. A key the file gives
// as "" keeps that value: `http ""` disables HTTP, `data ""` keeps filters
// in memory only, as the flags' "" does.
func mergeServeFlags(f *server.ConfigFile, set map[string]bool, respAddr, httpAddr, dataDir, fsync string) server.Config {
	pick := func(flagName, fileVal, flagVal string) string {
		if set[flagName] || !f.Given[flagName] {
			return flagVal
		}
		return fileVal
	}
	cfg := f.Config
	cfg.RESP = pick("resp", cfg.RESP, respAddr)
	cfg.HTTP = pick("http", cfg.HTTP, httpAddr)
	cfg.DataDir = pick("data", cfg.DataDir, dataDir)
	cfg.Fsync = serve.Fsync(pick("appendfsync", string(cfg.Fsync), fsync))
	return cfg
}

// serveMain runs the server until ctx is done, a listener fails or the
// start fails: the process's part (stdout's "listening" and "ready", the
// Go runtime's memory limit); server.Listen does the rest. It listens
// first: the checks that need no network come before, those against the
// sets' servers after, while every set answers "maybe"; a failure of
// those stops the process with their message.
func serveMain(ctx context.Context, cfg server.Config, stdout io.Writer) error {
	srv, err := server.Listen(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	memCtx, stopMem := context.WithCancel(ctx)
	defer stopMem()
	followMemoryLimit(memCtx, srv.Store().UsedMemory, srv.Connections, cfg.MaxMemory)
	// "listening" once the listeners serve; "ready" once every set is,
	// when /readyz says 200 (at once without table-backed sets).
	fmt.Fprintln(stdout, "bloomgate serve: listening")
	readyCtx, stopReady := context.WithCancel(ctx)
	readyDone := make(chan struct{})
	defer func() { stopReady(); <-readyDone }()
	go func() {
		defer close(readyDone)
		select {
		case <-readyCtx.Done():
			return
		case <-srv.Started():
		}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for !srv.Ready() {
			select {
			case <-readyCtx.Done():
				return
			case <-t.C:
			}
		}
		fmt.Fprintln(stdout, "bloomgate serve: ready")
	}()
	select {
	case <-ctx.Done():
	case err := <-srv.Err():
		if errors.Is(err, server.ErrStart) {
			srv.Close()
			return err
		}
		cfg.Logger.Error("listener failed", "err", err)
	}
	return srv.Close()
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bloomgate version\n\nPrints the build: version (\"devel\" for a build from a work tree), VCS revision, Go version.")
	}
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	v := version.Get()
	fmt.Fprintf(stdout, "bloomgate %s\n", v.Version)
	if v.Revision != "" {
		fmt.Fprintf(stdout, "revision %s\n", v.Revision)
	}
	fmt.Fprintf(stdout, "go %s\n", v.GoVersion)
	return exitOK
}
