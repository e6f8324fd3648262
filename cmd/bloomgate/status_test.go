package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// EnvArtifacts names a directory where browser tests keep their
// screenshots; by default they go to the test's temporary directory, which
// is removed after the test.
const EnvArtifacts = "BLOOMGATE_TEST_ARTIFACTS"

// statusRow is what the status page shows for one key, read from the DOM.
type statusRow struct {
	Ready    string `json:"ready"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Role     string `json:"role"`
	Mode     string `json:"mode"`
	Lag      string `json:"lag"`
	Position string `json:"position"`
	Lookups  uint64 `json:"lookups"`
	PerSec   string `json:"perSec"`
	Absent   string `json:"absent"`
	FP       string `json:"fp"`
	Fill     string `json:"fill"`
	Gen      string `json:"gen"`
	Points   int    `json:"points"` // of the lookups chart
	Bg       string `json:"bg"`     // the row's background colour
	Meta     string `json:"meta"`   // the line above the table
}

const statusRowJS = `(() => {
  const tr = document.querySelector('tr[data-name="%s"]');
  if (!tr) return null;
  const td = c => tr.querySelector('td.' + c);
  const text = c => (td(c).firstChild || {}).nodeValue || ''; // without the small print
  const small = c => (td(c).querySelector('small') || {}).textContent || '';
  const line = td('lookups').querySelector('polyline');
  return {
    ready: tr.dataset.ready, state: text('state'), reason: small('state'), role: text('role'), mode: small('role'),
    lag: text('lag'), position: small('lag'), lookups: Number(td('lookups').dataset.lookups),
    perSec: text('lookups'), absent: text('absent'), fp: text('fp'),
    fill: text('fill'), gen: text('generation'),
    points: line ? line.getAttribute('points').split(' ').length : 0,
    bg: getComputedStyle(td('state')).backgroundColor,
    meta: document.getElementById('meta').textContent,
  };
})()`

// TestServeStatusPage loads the status page in headless Chromium from a
// server whose set follows a table fed by inserts and looked up over RESP:
// the page shows the set ready with its lookups rising, and turns its row
// red once the feed is stopped (the walsender stopped with SIGSTOP) for
// longer than max-lag. Screenshots of both are kept (see EnvArtifacts).
func TestServeStatusPage(t *testing.T) {
	testsvc.Short(t, "starts a PostgreSQL cluster, the server and a browser")
	chromium := testsvc.Binary(t, "chromium")
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "INSERT INTO users SELECT 'user' || i || '@example.com' FROM generate_series(0, 999) i"); err != nil {
		t.Fatal(err)
	}
	const password = "s3cret"
	conf, respAddr, httpAddr := serveConf(t, t.TempDir(), fmt.Sprintf(`requirepass %s
set users {
  postgres %s
  table users
  column email
  slot bg_users
  publication bg_users
  confirm SELECT 1 FROM users WHERE email = $1
  kind cuckoo
  max-lag 2s
}
`, password, pg.DSN))
	startServe(t, bin, "-config", conf)
	waitReadyz(t, httpAddr, 30*time.Second)

	// The application: inserts rows and looks keys up, present and absent,
	// until the test ends.
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Password: password})
	defer rdb.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			pool.Exec(ctx, "INSERT INTO users VALUES ($1)", fmt.Sprintf("new%d@example.com", i))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for range 20 {
				rdb.Do(ctx, "BF.EXISTS", "users", fmt.Sprintf("user%d@example.com", rand.IntN(2000)))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bctx := browser(t, ctx, chromium)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:"+password))
	// The Basic credentials a browser sends once it has asked for them.
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 420), chromedp.Navigate("http://"+httpAddr+"/?every=1")); err != nil {
		t.Fatal(err)
	}
	row := func() (statusRow, bool) {
		r, err := chromedp.Run(bctx, chromedp.Evaluate[*statusRow](fmt.Sprintf(statusRowJS, "users")))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if r == nil {
			return statusRow{}, false
		}
		return *r, true
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	// Ready, lookups rising: the count grows between two polls, the rate
	// shown is above zero, and the chart has several points.
	var first, last statusRow
	testsvc.Eventually(t, 30*time.Second, func() bool {
		r, ok := row()
		if !ok || r.Ready != "true" || r.Lookups == 0 {
			return false
		}
		if first.Lookups == 0 {
			first = r
		}
		last = r
		rate, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(r.PerSec, " M"), " k")), 64)
		return r.Lookups > first.Lookups && rate > 0 && r.Points >= 5
	}, "the page never showed the set ready with lookups rising: first %+v, last %+v", &first, &last)
	t.Logf("ready: %+v", last)
	if last.State != "ready" || last.Role != "follower" || last.Mode != "follow" || !strings.HasSuffix(last.Lag, " s") || !strings.Contains(last.Position, "/") {
		t.Errorf("the ready row shows state %q, role %q (%q), lag %q at %q", last.State, last.Role, last.Mode, last.Lag, last.Position)
	}
	var info struct {
		TargetFPRate float64 `json:"target_fp_rate"`
	}
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/v1/sets/users", nil)
	req.Header.Set("Authorization", "Bearer "+password)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
	}
	if want := fmt.Sprintf(" / %.3f %%", 100*info.TargetFPRate); info.TargetFPRate == 0 || !strings.HasSuffix(last.FP, want) || last.Gen == "—" || !strings.HasSuffix(last.Absent, "%") {
		t.Errorf("the ready row shows false positives %q, generation %q, absent %q", last.FP, last.Gen, last.Absent)
	}
	if last.Bg == red {
		t.Errorf("a ready row is red")
	}
	screenshot("status-ready.png")

	// The feed stops: the walsender is stopped past max-lag.
	var walsender int
	if err := pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bg_users'").Scan(&walsender); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(walsender, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(walsender, syscall.SIGCONT)
	testsvc.Eventually(t, 30*time.Second, func() bool {
		r, ok := row()
		last = r
		return ok && r.Ready == "false" && r.Bg == red && exceedsMaxLag.MatchString(r.Reason) && strings.Contains(r.Meta, "1 not ready")
	}, "the page never turned the stalled set red: %+v", &last)
	t.Logf("stalled: %+v", last)
	screenshot("status-stalled.png")

	// And back once the feed moves again.
	syscall.Kill(walsender, syscall.SIGCONT)
	testsvc.Eventually(t, 30*time.Second, func() bool {
		r, ok := row()
		last = r
		return ok && r.Ready == "true" && r.Bg != red
	}, "the page never showed the set ready again: %+v", &last)
}

// exceedsMaxLag matches the reason of a set behind by more than max-lag.
var exceedsMaxLag = regexp.MustCompile(`(?i)exceeds max-?lag`)

// red is the background of a row that is not ready (the page's tr.bad).
const red = "rgb(255, 221, 221)"

// browser starts headless Chromium with a fresh profile and nothing that
// talks to the network by itself, and returns a context for chromedp.Run.
func browser(t *testing.T, ctx context.Context, chromium string) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox, // as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// The first action starts the browser.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return bctx
}
