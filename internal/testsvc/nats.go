package testsvc

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NATSCluster is a 3-node JetStream cluster of the machine's nats-server,
// on free loopback ports, in a temporary directory, for tests that kill a
// node or need replicated streams. NewNATSCluster returns it healthy; the
// test's cleanup kills every node.
type NATSCluster struct {
	t       testing.TB
	bin     string
	dir     string
	client  []string // host:port
	monitor []string
	procs   []*exec.Cmd
	waits   []chan struct{} // closed when procs[i] has exited
}

// natsHealthy bounds the wait for a new cluster's meta leader; a busy
// machine has needed tens of seconds.
const natsHealthy = 90 * time.Second

// NewNATSCluster starts three nodes and waits until each reports healthy
// (JetStream has a meta leader and the node is current). A node that exits
// at start (a port taken between choosing and binding it) makes it start
// the cluster again on other ports; a cluster that is not healthy within
// 90 s fails the test with the nodes' logs.
func NewNATSCluster(t testing.TB) *NATSCluster {
	t.Helper()
	bin := Binary(t, "nats-server")
	var last string
	for attempt := range 3 {
		c := &NATSCluster{t: t, bin: bin, dir: filepath.Join(t.TempDir(), fmt.Sprint("nats", attempt))}
		t.Cleanup(c.stopAll)
		err := c.launch()
		if err == nil {
			return c
		}
		last = err.Error()
		c.stopAll()
	}
	t.Fatalf("testsvc: no healthy NATS cluster after 3 starts: %s", last)
	return nil
}

var (
	sharedNATSMu  sync.Mutex
	sharedNATS    *NATSCluster
	sharedNATSDir string
	sharedNATSErr error
)

// SharedNATSCluster returns the test binary's one 3-node cluster, started
// on first use and stopped when Main returns, for tests that never kill or
// restart a node (those start their own with NewNATSCluster): a cluster's
// start, mostly its meta-leader election, costs seconds per test. Tests
// give their streams and buckets unique names and delete them.
func SharedNATSCluster(t testing.TB) *NATSCluster {
	t.Helper()
	if !mainActive.Load() {
		t.Fatal("testsvc: SharedNATSCluster needs the package's tests run through testsvc.Main (a TestMain calling it)")
	}
	bin := Binary(t, "nats-server")
	sharedNATSMu.Lock()
	defer sharedNATSMu.Unlock()
	if sharedNATS == nil && sharedNATSErr == nil {
		sharedNATSDir, sharedNATSErr = os.MkdirTemp("", "bloomgate-testnats")
		for attempt := 0; sharedNATSErr == nil && attempt < 3; attempt++ {
			c := &NATSCluster{bin: bin, dir: filepath.Join(sharedNATSDir, fmt.Sprint("nats", attempt))}
			err := c.launch()
			if err == nil {
				sharedNATS = c
				break
			}
			c.stopAll()
			if attempt == 2 {
				sharedNATSErr = fmt.Errorf("no healthy NATS cluster after 3 starts: %v", err)
			}
		}
	}
	if sharedNATSErr != nil {
		t.Fatalf("testsvc: shared NATS cluster: %v", sharedNATSErr)
	}
	return sharedNATS
}

// stopSharedNATS stops the shared cluster, if one was started.
func stopSharedNATS() {
	sharedNATSMu.Lock()
	defer sharedNATSMu.Unlock()
	if sharedNATS != nil {
		sharedNATS.stopAll()
		sharedNATS = nil
	}
	if sharedNATSDir != "" {
		os.RemoveAll(sharedNATSDir)
	}
}

func (c *NATSCluster) launch() error {
	var routes, cluster []string
	for range 3 {
		for _, dst := range []*[]string{&c.client, &cluster, &c.monitor} {
			p, err := freePort()
			if err != nil {
				return err
			}
			*dst = append(*dst, fmt.Sprintf("127.0.0.1:%d", p))
		}
	}
	for _, a := range cluster {
		routes = append(routes, "nats-route://"+a)
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	for i := range 3 {
		conf := fmt.Sprintf("listen: %q\nhttp: %q\nserver_name: \"n%d\"\n"+
			"jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }\n"+
			"cluster { name: \"bg\", listen: %q, routes: [%s] }\n",
			c.client[i], c.monitor[i], i, filepath.Join(c.dir, fmt.Sprint("n", i)), cluster[i], strings.Join(routes, ", "))
		if err := os.WriteFile(c.conf(i), []byte(conf), 0o644); err != nil {
			return err
		}
		c.procs, c.waits = append(c.procs, nil), append(c.waits, nil)
		if err := c.start(i); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(natsHealthy)
	for i := range 3 {
		for !c.healthy(i) {
			if c.exited(i) {
				return fmt.Errorf("node n%d exited: %s", i, c.Log(i))
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node n%d not healthy after %v: %s", i, natsHealthy, c.Log(i))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func (c *NATSCluster) conf(i int) string { return filepath.Join(c.dir, fmt.Sprintf("n%d.conf", i)) }
func (c *NATSCluster) log(i int) string  { return filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)) }

func (c *NATSCluster) start(i int) error {
	log, err := os.OpenFile(c.log(i), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(c.bin, "-c", c.conf(i))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.procs[i], c.waits[i] = cmd, done
	return nil
}

func (c *NATSCluster) exited(i int) bool {
	select {
	case <-c.waits[i]:
		return true
	default:
		return false
	}
}

func (c *NATSCluster) healthy(i int) bool {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + c.monitor[i] + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Kill stops node i at once (SIGKILL) and waits until it has exited.
func (c *NATSCluster) Kill(i int) {
	if p := c.procs[i]; p != nil {
		p.Process.Kill()
		<-c.waits[i]
		c.procs[i] = nil
	}
}

// Start starts node i again, on its ports and with its store, after Kill,
// and waits until it reports healthy (within 90 s, or the test fails).
func (c *NATSCluster) Start(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(natsHealthy)
	for !c.healthy(i) {
		if c.exited(i) || time.Now().After(deadline) {
			c.t.Fatalf("testsvc: NATS node n%d did not come back: %s", i, c.Log(i))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *NATSCluster) stopAll() {
	for i := range c.procs {
		c.Kill(i)
	}
}

// URLs is the client URL list of all nodes, comma-separated, as nats.go
// and bloomgate's config take it.
func (c *NATSCluster) URLs() string {
	var u []string
	for _, a := range c.client {
		u = append(u, "nats://"+a)
	}
	return strings.Join(u, ",")
}

// Log returns the end of node i's log, for a failing test's message.
func (c *NATSCluster) Log(i int) string { return tail(c.log(i)) }
