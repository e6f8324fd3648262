package main

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestDeployBuild runs deploy/build.sh: a CGO_ENABLED=0 binary with no
// dynamic loader (the FROM scratch image has none), the release version
// stamped in, and every file the Containerfile copies.
func TestDeployBuild(t *testing.T) {
	testsvc.Short(t, "builds the static binary")
	// The script, as a user runs it.
	out, err := exec.Command("sh", "../../deploy/build.sh", "v9.9.9-test").CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/build.sh: %v\n%s", err, out)
	}
	defer os.RemoveAll("../../deploy/image")
	bin := "../../deploy/image/bloomgate"
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader; FROM scratch has none")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v", libs)
	}
	v, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "bloomgate v9.9.9-test") {
		t.Errorf("bloomgate version: %v\n%s", err, v)
	}
	for _, src := range containerfileSources(t) {
		if _, err := os.Stat(filepath.Join("../../deploy/image", src)); err != nil {
			t.Errorf("Containerfile copies %s, which deploy/build.sh did not make: %v", src, err)
		}
	}
}

// containerfileSources parses deploy/Containerfile (instructions known to
// the Dockerfile format, FROM scratch, exec-form ENTRYPOINT and CMD) and
// returns the sources of its COPY lines.
func containerfileSources(t *testing.T) []string {
	t.Helper()
	fh, err := os.Open("../../deploy/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	known := map[string]bool{"FROM": true, "COPY": true, "USER": true, "VOLUME": true, "EXPOSE": true,
		"ENTRYPOINT": true, "CMD": true, "HEALTHCHECK": true, "LABEL": true, "ENV": true, "WORKDIR": true, "STOPSIGNAL": true}
	var sources []string
	from := ""
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, args, _ := strings.Cut(line, " ")
		switch {
		case !known[instr]:
			t.Errorf("Containerfile line %d: unknown instruction %q", n, instr)
		case instr == "FROM":
			from = args
		case instr == "COPY":
			f := strings.Fields(args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--chown=") {
				f = f[1:]
			}
			if len(f) != 2 {
				t.Errorf("Containerfile line %d: COPY wants a source and a destination", n)
				continue
			}
			sources = append(sources, f[0])
		case instr == "ENTRYPOINT" || instr == "CMD" || instr == "VOLUME":
			var v []string
			if err := json.Unmarshal([]byte(args), &v); err != nil {
				t.Errorf("Containerfile line %d: %s is not exec form (a JSON array): %v", n, instr, err)
			}
		}
	}
	if from != "scratch" {
		t.Errorf("Containerfile is FROM %q, want scratch (nothing to fetch)", from)
	}
	return sources
}

// TestDeploySystemdUnit checks deploy/bloomgate.service with
// systemd-analyze verify, its ExecStart pointed at the built binary.
func TestDeploySystemdUnit(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	bin := buildBinary(t)
	unit, err := os.ReadFile("../../deploy/bloomgate.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/bloomgate serve ") {
		t.Fatal("the unit's ExecStart is not /usr/local/bin/bloomgate serve …")
	}
	path := filepath.Join(t.TempDir(), "bloomgate.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/bloomgate", bin)), 0o644)
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// Outside a booted systemd (a container) verify may complain about the
	// manager itself; only lines about the unit file count.
	var bad []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "bloomgate.service") {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		t.Errorf("systemd-analyze verify (%v):\n%s", err, strings.Join(bad, "\n"))
	}
	t.Logf("systemd-analyze verify: %v %s", err, out)
}

// TestDeployDashboard checks that every metric the Grafana dashboard
// queries is one the server serves on /metrics (with a table-backed set).
func TestDeployDashboard(t *testing.T) {
	t.Parallel() // a server of its own
	raw, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	metricRE := regexp.MustCompile(`\bbloomgate_[a-z_]+\b`)
	want := map[string]string{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricRE.FindAllString(tg.Expr, -1) {
				want[m] = p.Title
			}
		}
	}
	for _, v := range dash.Templating.List {
		if s, ok := v.Query.(string); ok {
			for _, m := range metricRE.FindAllString(s, -1) {
				want[m] = "template variable"
			}
		}
	}
	if len(want) < 10 {
		t.Fatalf("the dashboard queries only %d metrics", len(want))
	}

	served := servedMetrics(t)
	for m, panel := range want {
		base := m
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suf); ok && served[b] {
				base = b
			}
		}
		if !served[base] {
			t.Errorf("panel %q queries %s, which the server does not serve", panel, m)
		}
	}
}

// servedMetrics starts the server with a rebuild-only SQLite set and
// returns the metric names /metrics lists.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	bin := buildBinary(t)
	dir := t.TempDir()
	dbPath := sqliteUsers(t, dir, 10)
	respAddr, httpAddr := freeAddr(t), freeAddr(t)
	conf := filepath.Join(dir, "bloomgate.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("resp %s\nhttp %s\ndata %s\nset users {\n  sqlite %s\n  follow no\n  table users\n  column email\n}\n",
		respAddr, httpAddr, filepath.Join(dir, "data"), dbPath)), 0o644)
	startServe(t, bin, "-config", conf)
	var body []byte
	testsvc.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		// The build histogram appears once the set's first build is done.
		return strings.Contains(string(body), "bloomgate_build_duration_seconds")
	}, "no build metrics on /metrics")
	served := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			served[strings.Fields(name)[0]] = true
		}
	}
	return served
}
