// Command startclock times a Redis-protocol server's start: it runs the
// server's command line, asks BF.EXISTS KEY ITEM on ADDR every 200 µs from
// the moment it exec'd the command, and reports the time until the first
// answer that is not an error (a refused connection, redis-server's
// LOADING, bloomgate's "not ready"): the start until the key can be asked.
// It then stops the server with SIGTERM and waits for it, and repeats.
// bench/serve-start.sh runs it for bloomgate and redis-server + RedisBloom
// holding the same filter.
//
//	startclock -addr 127.0.0.1:PORT -key big -n 5 -- server args…
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "", "the server's RESP address")
	key := flag.String("key", "big", "the key to ask BF.EXISTS of")
	n := flag.Int("n", 5, "starts to time")
	timeout := flag.Duration("timeout", time.Minute, "longest start before giving up")
	flag.Parse()
	if *addr == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: startclock -addr ADDR [-key KEY] [-n N] -- command args…")
		os.Exit(2)
	}
	redis.SetLogger(quiet{}) // a refused dial is the expected answer until the server listens
	var took []time.Duration
	for i := range *n {
		d, err := start(*addr, *key, *timeout, flag.Args())
		if err != nil {
			fmt.Fprintf(os.Stderr, "start %d: %v\n", i+1, err)
			os.Exit(1)
		}
		took = append(took, d)
		fmt.Printf("start %d: %.1f ms\n", i+1, ms(d))
	}
	slices.Sort(took)
	fmt.Printf("median %.1f ms, min %.1f ms, max %.1f ms\n", ms(took[len(took)/2]), ms(took[0]), ms(took[len(took)-1]))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// probeEvery is the time between two probes.
const probeEvery = 200 * time.Microsecond

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// start execs args and returns the time until BF.EXISTS key answers.
func start(addr, key string, timeout time.Duration, args []string) (time.Duration, error) {
	client := func() *redis.Client {
		// The client's own dial retries wait 100 ms apart by default: at
		// the probes' pace instead, or every start is counted in 100 ms steps.
		return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
			DialerRetries: 1, DialerRetryBackoff: func(int) time.Duration { return probeEvery },
			ReadTimeout: time.Second, PoolSize: 1, Protocol: 2, DisableIdentity: true})
	}
	c := client()
	defer func() { c.Close() }()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = nil, nil
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			return errors.New("did not stop within 30 s of SIGTERM")
		}
	}
	var last error
	for time.Since(t0) < timeout {
		select {
		case err := <-exited:
			return 0, fmt.Errorf("the server exited before answering: %v (last answer: %v)", err, last)
		default:
		}
		_, last = c.Do(context.Background(), "BF.EXISTS", key, "startclock-probe").Bool()
		if last == nil {
			d := time.Since(t0)
			return d, stop()
		}
		if _, reply := errors.AsType[redis.Error](last); !reply {
			// Not the server's answer (a refused dial): a new client dials
			// at the next probe. The pool would instead hand back its last
			// dial error for a while, and quantise every start to that.
			c.Close()
			c = client()
		}
		time.Sleep(probeEvery)
	}
	stop()
	return 0, fmt.Errorf("no answer within %v: %v", timeout, last)
}
