package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// imageConfig is the part of an OCI image's configuration the deployment
// depends on (buildah inspect's OCIv1.config).
type imageConfig struct {
	User         string              `json:"User"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	Volumes      map[string]struct{} `json:"Volumes"`
}

// TestDeployImage builds deploy/Containerfile with buildah, as
// docs/operations.md says, and checks the image: its configuration is what
// the docs say, and its binary, run with the image's command line as the
// image's user in the image's filesystem (a chroot: this machine runs no
// containers), serves, writes its data to the volume, and finds it again
// after a restart.
func TestDeployImage(t *testing.T) {
	testsvc.Short(t, "builds the container image")
	buildah := testsvc.Binary(t, "buildah")
	if os.Geteuid() != 0 {
		testsvc.Unavailable(t, "building with buildah's vfs storage and running the image's binary in a chroot need root")
	}
	if out, err := exec.Command("sh", "../../deploy/build.sh", "v9.9.9-image").CombinedOutput(); err != nil {
		t.Fatalf("deploy/build.sh: %v\n%s", err, out)
	}
	defer os.RemoveAll("../../deploy/image")

	// A private image store, removed with the test.
	store := t.TempDir()
	bh := func(args ...string) string {
		t.Helper()
		args = append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}, args...)
		out, err := exec.Command(buildah, args...).Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		return strings.TrimSpace(string(out))
	}
	start := time.Now()
	bh("bud", "--quiet", "--tag", "bloomgate:v9.9.9-image", "--file", "../../deploy/Containerfile", "../../deploy/image")
	t.Logf("buildah bud: %v", time.Since(start))

	var inspect struct {
		OCIv1 struct {
			Config imageConfig `json:"config"`
		} `json:"OCIv1"`
	}
	if err := json.Unmarshal([]byte(bh("inspect", "--type", "image", "bloomgate:v9.9.9-image")), &inspect); err != nil {
		t.Fatal(err)
	}
	cfg := inspect.OCIv1.Config
	t.Logf("image config: %+v", cfg)
	checkImageDocs(t, cfg)

	// The image's filesystem, and its user.
	ctr := bh("from", "bloomgate:v9.9.9-image")
	defer bh("rm", ctr)
	root := bh("mount", ctr)
	defer bh("umount", ctr)
	uid, gid := imageUser(t, cfg.User)
	for _, v := range slices.Sorted(maps.Keys(cfg.Volumes)) {
		fi, err := os.Stat(filepath.Join(root, v))
		if err != nil {
			t.Fatalf("volume %s: %v", v, err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || fi.Mode().Perm()&0o200 == 0 {
			t.Errorf("volume %s is owned by uid %d (%v); the image runs as %s: a fresh volume copied from the image is not writable",
				v, st.Uid, fi.Mode(), cfg.User)
		}
	}

	// The operator's config, mounted over /bloomgate.conf as the docs'
	// podman run does; no set, so nothing to reach.
	if err := os.WriteFile(filepath.Join(root, "bloomgate.conf"), []byte("appendfsync always\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The image's command line, with its two listen addresses moved to
	// free ports (the machine is shared; the interfaces stay 0.0.0.0).
	argv := append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)
	respAddr, httpAddr := freeAddr(t), freeAddr(t)
	listen := map[string]string{"-resp": respAddr, "-http": httpAddr}
	for i := 0; i+1 < len(argv); i++ {
		if a, ok := listen[argv[i]]; ok {
			_, port, _ := net.SplitHostPort(a)
			host, _, err := net.SplitHostPort(argv[i+1])
			if err != nil {
				t.Fatalf("the image's %s %q: %v", argv[i], argv[i+1], err)
			}
			argv[i+1] = net.JoinHostPort(host, port)
			delete(listen, argv[i])
		}
	}
	if len(listen) > 0 {
		t.Fatalf("the image's command line %q lacks %v", argv, listen)
	}
	const password = "s3cret"
	run := func() *server {
		t.Helper()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = "/"
		cmd.Env = []string{"BLOOMGATE_PASSWORD=" + password}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		srv := startCmd(t, cmd)
		testsvc.Eventually(t, 10*time.Second, func() bool {
			resp, err := http.Get("http://" + httpAddr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, "the image's server never answered /readyz; stderr:\n%s", srv.stderr)
		return srv
	}
	srv := run()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Password: password})
	defer rdb.Close()
	if err := rdb.Do(ctx, "BF.ADD", "revoked", "token-1").Err(); err != nil {
		t.Fatalf("BF.ADD: %v\n%s", err, srv.stderr)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, srv.stderr)
	}
	srv = run()
	if ok, err := rdb.Do(ctx, "BF.EXISTS", "revoked", "token-1").Bool(); err != nil || !ok {
		t.Errorf("after a restart on the same volume BF.EXISTS = %v, %v; stderr:\n%s", ok, err, srv.stderr)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.wait()
}

// checkImageDocs checks that docs/operations.md says what the image does:
// its command line, user, ports and volume, in one sentence.
func checkImageDocs(t *testing.T, cfg imageConfig) {
	t.Helper()
	var ports []string
	for p := range cfg.ExposedPorts {
		ports = append(ports, "`"+p+"`")
	}
	slices.Sort(ports)
	var vols []string
	for v := range cfg.Volumes {
		vols = append(vols, "`"+v+"`")
	}
	slices.Sort(vols)
	want := fmt.Sprintf("The image runs `%s` as user `%s`, exposes %s, and declares the volume %s.",
		strings.Join(append(slices.Clone(cfg.Entrypoint), cfg.Cmd...), " "), cfg.User,
		strings.Join(ports, " and "), strings.Join(vols, ", "))
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), want) {
		t.Errorf("docs/operations.md does not say what the image does; want the sentence\n%s", want)
	}
	// The command line listens on the ports the image exposes.
	for i, a := range cfg.Cmd {
		if (a == "-resp" || a == "-http") && i+1 < len(cfg.Cmd) {
			_, port, _ := net.SplitHostPort(cfg.Cmd[i+1])
			if _, ok := cfg.ExposedPorts[port+"/tcp"]; !ok {
				t.Errorf("the image listens with %s %s but does not expose %s/tcp", a, cfg.Cmd[i+1], port)
			}
		}
	}
}

// imageUser parses an image's numeric USER uid:gid; the image has no
// /etc/passwd to look a name up in.
func imageUser(t *testing.T, user string) (uid, gid uint32) {
	t.Helper()
	u, g, ok := strings.Cut(user, ":")
	nu, err1 := strconv.ParseUint(u, 10, 32)
	ng, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil || nu == 0 {
		t.Fatalf("the image's USER is %q, want a numeric non-root uid:gid", user)
	}
	return uint32(nu), uint32(ng)
}
