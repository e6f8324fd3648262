package jetstream_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// natsPermissions are the permission lists of docs/operations.md ("Fan-out
// permissions") for one user, with the set's name in place of S.
type natsPermissions struct {
	Publish, Subscribe, DenyPublish []string
}

// docPermissions reads the feeder's and the instances' NATS permissions from
// docs/operations.md, so that the test runs exactly what the operator is told.
func docPermissions(t *testing.T, set string) (feeder, instance natsPermissions) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Fan-out permissions\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "## Fan-out permissions" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	sec = strings.NewReplacer("bloomgate.S", "bloomgate."+set, "BG_S", "BG_"+set).Replace(sec)
	blocks := regexp.MustCompile("(?s)```\n(.*?)```").FindAllStringSubmatch(sec, -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/operations.md, Fan-out permissions: %d code blocks, want the feeder's and the instances' NATS lists", len(blocks))
	}
	field := regexp.MustCompile(`(?ms)^(deny publish|publish|subscribe):\s*(\[.*?\])`)
	parse := func(block string) natsPermissions {
		var p natsPermissions
		for _, m := range field.FindAllStringSubmatch(block, -1) {
			var list []string
			if err := json.Unmarshal([]byte(m[2]), &list); err != nil {
				t.Fatalf("docs/operations.md: %s list %s: %v", m[1], m[2], err)
			}
			switch m[1] {
			case "publish":
				p.Publish = list
			case "subscribe":
				p.Subscribe = list
			case "deny publish":
				p.DenyPublish = list
			}
		}
		if len(p.Publish) == 0 || len(p.Subscribe) == 0 {
			t.Fatalf("docs/operations.md: no publish or subscribe list in\n%s", block)
		}
		return p
	}
	return parse(blocks[0][1]), parse(blocks[1][1])
}

func (p natsPermissions) conf() string {
	q := func(l []string) string {
		qs := make([]string, len(l))
		for i, s := range l {
			qs[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(qs, ", ") + "]"
	}
	pub := fmt.Sprintf("{ allow: %s }", q(p.Publish))
	if len(p.DenyPublish) > 0 {
		pub = fmt.Sprintf("{ allow: %s, deny: %s }", q(p.Publish), q(p.DenyPublish))
	}
	return fmt.Sprintf("{ publish: %s, subscribe: { allow: %s } }", pub, q(p.Subscribe))
}

// permServer is a private single-node JetStream server with the users
// feeder and instance.
type permServer struct {
	url string
	log string
}

// startPermServer starts nats-server with the docs' permissions for set and
// waits until both users can reach JetStream. The test's cleanup kills it.
func startPermServer(t *testing.T, set string) *permServer {
	t.Helper()
	bin := testsvc.Binary(t, "nats-server")
	feeder, instance := docPermissions(t, set)
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		addr := testsvc.FreeAddr(t)
		s := &permServer{url: "nats://" + addr, log: filepath.Join(dir, fmt.Sprint("server", attempt, ".log"))}
		conf := fmt.Sprintf("listen: %q\njetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }\n"+
			"authorization { users: [\n  { user: feeder, password: feeder, permissions: %s }\n  { user: instance, password: instance, permissions: %s }\n] }\n",
			addr, filepath.Join(dir, fmt.Sprint("store", attempt)), feeder.conf(), instance.conf())
		confPath := filepath.Join(dir, fmt.Sprint("server", attempt, ".conf"))
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(s.log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", confPath)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-exited })
		deadline := time.Now().Add(30 * time.Second)
		for {
			c, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URLs: []string{s.url}, User: "feeder", Password: "feeder", Timeout: time.Second})
			if err == nil {
				c.Close()
				t.Logf("nats-server with the docs' permissions:\n%s", conf)
				return s
			}
			select {
			case <-exited:
			default:
				if time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				t.Fatalf("nats-server not ready after 30 s: %v\n%s", err, s.tail())
			}
			if attempt == 2 {
				t.Fatalf("nats-server exited: %s", s.tail())
			}
			break // the port was taken meanwhile: another one
		}
	}
}

func (s *permServer) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// violations returns the server's log lines about refused publishes and
// subscriptions.
func (s *permServer) violations() []string {
	b, _ := os.ReadFile(s.log)
	var v []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Violation") {
			v = append(v, l)
		}
	}
	return v
}

func (s *permServer) dial(t *testing.T, user string) *jetstream.Conn {
	t.Helper()
	c, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URLs: []string{s.url}, User: user, Password: user, Name: user})
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestDocumentedPermissions runs a feeder and an instance of a set with the
// NATS permissions docs/operations.md gives them: the instance joins from
// the feeder's snapshot and follows new rows with no permission refused
// along the way, and the instance's credentials cannot write anything the
// set's instances trust (the log, the heartbeat and snapshot records, the
// lease, the snapshots), nor delete it.
func TestDocumentedPermissions(t *testing.T) {
	t.Parallel() // a set of its own; no node killed
	var b [4]byte
	crand.Read(b[:])
	name := "p" + hex.EncodeToString(b[:])
	srv := startPermServer(t, name)
	pg := fanouttest.NewPG(t, 20000)
	ctx := context.Background()

	// The feeder opens (creates) the set and bootstraps.
	fc := srv.dial(t, "feeder")
	fset, err := jetstream.Open(ctx, jetstream.Config{JetStream: fc.JetStream(), Set: name, LeaseTTL: testLeaseTTL, Logger: testLogger()})
	if err != nil {
		t.Fatalf("feeder: Open: %v\n%s", err, srv.tail())
	}
	fg, err := bloomgate.New(bloomgate.Config{Source: pg.Source, Capacity: 1 << 21})
	if err != nil {
		t.Fatal(err)
	}
	fol, err := fg.Follower(bloomgate.FollowConfig{Identity: "users.email", SnapshotInterval: time.Minute, MaxLag: testMaxLag})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fset.NewFeeder(jetstream.FeederConfig{Feed: pg.Feed(t), Gate: fol, HeartbeatInterval: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	fdone := make(chan struct{})
	go func() { f.Run(fctx); close(fdone) }()
	t.Cleanup(func() { fcancel(); <-fdone; fg.Close() })

	// The instance opens the set the feeder made and follows it. Its gate
	// has a Source only because bloomgate.New asks for one: an instance
	// never scans; the rows it has come from the feeder's snapshot.
	ic := srv.dial(t, "instance")
	iset, err := jetstream.Open(ctx, jetstream.Config{JetStream: ic.JetStream(), Set: name, LeaseTTL: testLeaseTTL, Logger: testLogger()})
	if err != nil {
		t.Fatalf("instance: Open: %v\n%s", err, strings.Join(srv.violations(), "\n"))
	}
	g, err := bloomgate.New(bloomgate.Config{Source: pg.Source, Capacity: 1 << 21})
	if err != nil {
		t.Fatal(err)
	}
	in, err := iset.NewInstance(jetstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithCancel(ctx)
	idone := make(chan struct{})
	go func() {
		g.Follow(ictx, in, bloomgate.FollowConfig{Identity: "users.email", Snapshots: in.Snapshots(), MaxLag: testMaxLag, SnapshotInterval: time.Hour})
		close(idone)
	}()
	t.Cleanup(func() { icancel(); <-idone; g.Close() })
	testsvc.Eventually(t, time.Minute, g.Ready, "instance not ready; server log:\n%s", srv.tail())
	for i := 1; i <= 20000; i += 997 {
		if k := fmt.Sprintf("pre%d@x", i); !g.MayContain([]byte(k)) {
			t.Fatalf("the ready instance lacks %s, a row of the feeder's snapshot", k)
		}
	}
	checkRows := func(prefix string) {
		t.Helper()
		var tok changefeed.Position
		for i := range 50 {
			if tok, err = pg.Insert(ctx, fmt.Sprintf("%s%d@x", prefix, i)); err != nil {
				t.Fatal(err)
			}
		}
		testsvc.Eventually(t, time.Minute, func() bool { return g.Position() >= tok }, "the instance did not apply %s", tok)
		for i := range 50 {
			if k := fmt.Sprintf("%s%d@x", prefix, i); !g.MayContain([]byte(k)) {
				t.Fatalf("false negative: %s, inserted after the instance joined", k)
			}
		}
	}
	checkRows("new")
	if v := srv.violations(); len(v) > 0 {
		t.Fatalf("the documented permissions refused the feeder or the instance:\n%s", strings.Join(v, "\n"))
	}

	// Everything an instance's credentials might write with, refused.
	forgeries := forgeWithInstanceCredentials(t, srv, name)
	copies := copyLogWithInstanceCredentials(t, srv, name)
	// None of it landed: the feeder's view of the assets.
	j := fc.JetStream()
	stream, err := j.Stream(ctx, "BG_"+name)
	if err != nil {
		t.Fatalf("the log stream: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		for _, f := range forgeries {
			if bytes.Contains(m.Data, f) {
				t.Fatalf("a forged message landed in the log at sequence %d", seq)
			}
		}
	}
	for _, bucket := range []string{"BG_" + name + "_pos", "BG_" + name + "_lease"} {
		kv, err := j.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		keys, err := kv.Keys(ctx)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		for _, k := range keys {
			if k == "forged" {
				t.Fatalf("a forged key landed in %s", bucket)
			}
			e, err := kv.Get(ctx, k)
			if err != nil {
				t.Fatalf("bucket %s key %s: %v", bucket, k, err)
			}
			for _, f := range forgeries {
				if bytes.Equal(e.Value(), f) {
					t.Fatalf("a forged value landed in %s key %s", bucket, k)
				}
			}
		}
	}
	obs, err := j.ObjectStore(ctx, "BG_"+name+"_snap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.GetInfo(ctx, "forged"); err == nil {
		t.Fatal("a forged object landed in the object store")
	}
	// The instance goes on: it still sees every new row. The feeder
	// appends them to the log meanwhile, which the instance's consumers of
	// the log would deliver if they could.
	checkRows("after")
	for _, c := range copies {
		m, err := fc.JetStream().Conn().RequestWithContext(ctx, "$JS.API.CONSUMER.INFO.BG_"+name+"."+c, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ci struct {
			Config struct {
				DeliverSubject string `json:"deliver_subject"`
			} `json:"config"`
			Delivered struct {
				Consumer uint64 `json:"consumer_seq"`
			} `json:"delivered"`
			PushBound bool `json:"push_bound"`
		}
		if err := json.Unmarshal(m.Data, &ci); err != nil {
			t.Fatal(err)
		}
		t.Logf("the instance's consumer %s of the log, delivering to %s: push bound %v, %d delivered", c, ci.Config.DeliverSubject, ci.PushBound, ci.Delivered.Consumer)
		if ci.PushBound || ci.Delivered.Consumer > 0 {
			t.Errorf("the instance's consumer of the log delivered %d messages to %s", ci.Delivered.Consumer, ci.Config.DeliverSubject)
		}
	}
	for _, bucket := range []string{"BG_" + name + "_pos", "BG_" + name + "_lease"} {
		kv, err := fc.JetStream().KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, "forged"); err == nil {
			t.Errorf("a copy of the log landed in %s", bucket)
		}
	}
	ost, err := fc.JetStream().Stream(ctx, "OBJ_BG_"+name+"_snap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ost.GetLastMsgForSubject(ctx, "$O.BG_"+name+"_snap.M.forged"); err == nil {
		t.Error("a copy of the log landed in the object store")
	}
}

// forgeWithInstanceCredentials tries, as the instance user, every write of
// the set's assets, and fails the test if one is accepted. It returns the
// payloads it tried to write.
func forgeWithInstanceCredentials(t *testing.T, srv *permServer, name string) [][]byte {
	t.Helper()
	var mu sync.Mutex
	var refused []string
	nc, err := nats.Connect(srv.url, nats.UserInfo("instance", "instance"), nats.Name("forger"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			refused = append(refused, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	forged := func(what string) []byte { return []byte("forged " + what + " " + name) }
	var payloads [][]byte
	// attempt runs op and returns as soon as it fails or the server reports
	// a permission refused meanwhile (the client does not fail a request
	// whose publish the server refused: it would wait for its timeout).
	attempt := func(what string, op func(ctx context.Context, p []byte) error) {
		t.Helper()
		p := forged(what)
		payloads = append(payloads, p)
		mu.Lock()
		before := len(refused)
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- op(ctx, p) }()
		var err error
		for err == nil {
			select {
			case err = <-done:
				if err == nil {
					t.Errorf("the instance's credentials could %s", what)
					return
				}
			case <-time.After(time.Millisecond):
				mu.Lock()
				if len(refused) > before {
					err = errors.New(refused[before])
				}
				mu.Unlock()
			}
		}
		cancel()
		<-done
		t.Logf("refused: %s: %v", what, err)
	}
	subject := "bloomgate." + name
	attempt("publish to the log subject", func(ctx context.Context, p []byte) error {
		_, err := j.Publish(ctx, subject, p)
		return err
	})
	pos, err := j.KeyValue(context.Background(), "BG_"+name+"_pos")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"head", "snapshot", "snapshot.prev", "forged"} {
		attempt("put pos key "+k, func(ctx context.Context, p []byte) error { _, err := pos.Put(ctx, k, p); return err })
	}
	attempt("delete pos key head", func(ctx context.Context, _ []byte) error { return pos.Delete(ctx, "head") })
	attempt("purge pos key snapshot", func(ctx context.Context, _ []byte) error { return pos.Purge(ctx, "snapshot") })
	lease, err := j.KeyValue(context.Background(), "BG_"+name+"_lease")
	if err != nil {
		t.Fatal(err)
	}
	attempt("put lease key feeder", func(ctx context.Context, p []byte) error { _, err := lease.Put(ctx, "feeder", p); return err })
	attempt("delete lease key feeder", func(ctx context.Context, _ []byte) error { return lease.Delete(ctx, "feeder") })
	for _, subj := range []string{"$KV.BG_" + name + "_lease.feeder", "$KV.BG_" + name + "_lease.forged"} {
		attempt("publish to "+subj, func(ctx context.Context, p []byte) error { _, err := j.Publish(ctx, subj, p); return err })
	}
	obs, err := j.ObjectStore(context.Background(), "BG_"+name+"_snap")
	if err != nil {
		t.Fatal(err)
	}
	attempt("put an object", func(ctx context.Context, p []byte) error {
		_, err := obs.PutBytes(ctx, "forged", p)
		return err
	})
	if names, err := obs.List(context.Background()); err == nil && len(names) > 0 {
		attempt("delete object "+names[0].Name, func(ctx context.Context, _ []byte) error { return obs.Delete(ctx, names[0].Name) })
	}
	for _, subj := range []string{"$O.BG_" + name + "_snap.C.forged", "$O.BG_" + name + "_snap.M.forged"} {
		attempt("publish to "+subj, func(ctx context.Context, p []byte) error { _, err := j.Publish(ctx, subj, p); return err })
	}
	// The JetStream API calls that change or remove a set's data.
	for _, st := range []string{"BG_" + name, "KV_BG_" + name + "_pos", "KV_BG_" + name + "_lease", "OBJ_BG_" + name + "_snap"} {
		attempt("purge stream "+st, func(ctx context.Context, _ []byte) error {
			s, err := j.Stream(ctx, st)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
		attempt("delete a message of stream "+st, func(ctx context.Context, _ []byte) error {
			s, err := j.Stream(ctx, st)
			if err != nil {
				return err
			}
			return s.DeleteMsg(ctx, 1)
		})
		attempt("delete stream "+st, func(ctx context.Context, _ []byte) error { return j.DeleteStream(ctx, st) })
		attempt("update stream "+st, func(ctx context.Context, _ []byte) error {
			_, err := j.UpdateStream(ctx, js.StreamConfig{Name: st, Subjects: []string{"forged." + name}})
			return err
		})
	}
	attempt("create a stream on the log subject", func(ctx context.Context, _ []byte) error {
		_, err := j.CreateStream(ctx, js.StreamConfig{Name: "forged_" + name, Subjects: []string{"forged.>"}})
		return err
	})
	// A push consumer delivers a stream's messages to the subject its
	// creator names, and the server checks no permission on that subject:
	// a consumer on the heartbeat bucket delivering into the log subject
	// would copy every heartbeat into the log. Instances may create
	// consumers on the log's stream only.
	for i, st := range []string{"KV_BG_" + name + "_pos", "KV_BG_" + name + "_lease", "OBJ_BG_" + name + "_snap"} {
		attempt("create a consumer of "+st+" delivering to "+subject, func(ctx context.Context, _ []byte) error {
			return createPushConsumer(ctx, nc, st, fmt.Sprint("forged", i), subject)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the server refused %d operations of the instance's credentials", len(refused))
	return payloads
}

// logCopies are the subjects a push consumer of the log, which an
// instance's credentials may create, is pointed at by
// copyLogWithInstanceCredentials.
func logCopies(name string) []string {
	return []string{"$KV.BG_" + name + "_pos.forged", "$KV.BG_" + name + "_lease.forged", "$O.BG_" + name + "_snap.M.forged"}
}

// copyLogWithInstanceCredentials creates, as the instance user, push
// consumers of the log delivering into the buckets and the object store.
// The server accepts them (the instance may create consumers of the log,
// and the deliver subject is not checked); the test then shows that
// nothing is delivered: the buckets' streams capture wildcard subjects,
// which are no interest on a literal deliver subject.
func copyLogWithInstanceCredentials(t *testing.T, srv *permServer, name string) []string {
	t.Helper()
	nc, err := nats.Connect(srv.url, nats.UserInfo("instance", "instance"), nats.Name("forger"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var names []string
	for i, subj := range logCopies(name) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cname := fmt.Sprint("copy", i)
		if err := createPushConsumer(ctx, nc, "BG_"+name, cname, subj); err != nil {
			t.Logf("instance: a consumer of the log delivering to %s: %v", subj, err)
		} else {
			names = append(names, cname)
		}
		cancel()
	}
	return names
}

// createPushConsumer creates a push consumer of stream, from its first
// message, delivering to deliver.
func createPushConsumer(ctx context.Context, nc *nats.Conn, stream, name, deliver string) error {
	req, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
		"name": name, "deliver_subject": deliver, "deliver_policy": "all", "ack_policy": "none"}})
	m, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+stream+"."+name, req)
	if err != nil {
		return err
	}
	var resp struct {
		Error *struct{ Description string } `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return errors.New(resp.Error.Description)
	}
	return nil
}
