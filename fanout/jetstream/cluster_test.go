package jetstream_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// natsCluster is a 3-node JetStream cluster of the machine's nats-server,
// on free loopback ports, in temporary directories.
type natsCluster struct {
	t     testing.TB
	bin   string
	dir   string
	ports []int
	procs []*exec.Cmd
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startCluster(t testing.TB) *natsCluster {
	t.Helper()
	bin := testsvc.Binary(t, "nats-server")
	c := &natsCluster{t: t, bin: bin, dir: t.TempDir()}
	var routes []string
	cports := make([]int, 3)
	for i := range 3 {
		c.ports = append(c.ports, freePort(t))
		cports[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[i]))
	}
	for i := range 3 {
		conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
server_name: "n%d"
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }
cluster { name: "bg", listen: "127.0.0.1:%d", routes: [%s] }
`, c.ports[i], i, filepath.Join(c.dir, fmt.Sprint("n", i)), cports[i], strings.Join(routes, ", "))
		path := filepath.Join(c.dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		c.procs = append(c.procs, nil)
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.Kill(i)
		}
	})
	return c
}

func (c *natsCluster) start(i int) {
	cmd := exec.Command(c.bin, "-c", filepath.Join(c.dir, fmt.Sprintf("n%d.conf", i)))
	log, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[i] = cmd
}

// Kill stops node i at once (SIGKILL) and waits for it.
func (c *natsCluster) Kill(i int) {
	if p := c.procs[i]; p != nil {
		p.Process.Kill()
		p.Wait()
		c.procs[i] = nil
	}
}

// URLs is the client URL list of all nodes.
func (c *natsCluster) URLs() string {
	var u []string
	for _, p := range c.ports {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(u, ",")
}

// connect connects to the cluster, reconnecting forever.
func connect(ctx context.Context, urls string) (*nats.Conn, error) {
	for {
		nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err == nil {
			return nc, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
