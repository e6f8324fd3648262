package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// snippetPrelude declares what the docs' Go fragments take as given: a
// context, a pgx pool, a connection string, the looked-up and added keys,
// an application's repository, a JetStream client and a Source.
const snippetPrelude = `package docsnippets

import (
	"context"

	"github.com/bloomgate/bloomgate"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
)

type User struct{ Email string }

var (
	ctx                        context.Context
	pool                       *pgxpool.Pool
	url, dsn, dir              string
	email, newEmail, oldEmail  string
	key                        []byte
	js                         jetstream.JetStream
	users                      bloomgate.Source
	g                          *bloomgate.Gate
	repo                       interface {
		FindByEmail(context.Context, string) (User, bool, error)
	}
)
`

// snippetImports are imported by every fragment's file; a fragment's own
// import block is added to them.
var snippetImports = []string{
	`"context"`, `"log"`, `"time"`,
	`"github.com/bloomgate/bloomgate"`,
	`"github.com/bloomgate/bloomgate/fanout"`,
	`fanjs "github.com/bloomgate/bloomgate/fanout/jetstream"`,
	`"github.com/bloomgate/bloomgate/filter"`,
	`"github.com/bloomgate/bloomgate/source/postgres"`,
	`"github.com/bloomgate/bloomgate/source/sqlite"`,
	`"github.com/prometheus/client_golang/prometheus"`,
}

// goBlocks returns the ```go blocks of a doc file under the module root.
func goBlocks(t *testing.T, path string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	rest := string(doc)
	for {
		var ok bool
		if _, rest, ok = strings.Cut(rest, "\n```go\n"); !ok {
			return blocks
		}
		var block string
		block, rest, _ = strings.Cut(rest, "\n```")
		blocks = append(blocks, block+"\n")
	}
}

// unusedOnly matches the compiler's complaints a fragment may cause
// without being wrong: it shows a call's results without using them, and
// not every fragment uses every import.
var unusedOnly = regexp.MustCompile(`(declared and not used|imported and not used|"[^"]+" imported as \w+ and not used)`)

// TestDocGoSnippets compiles every Go fragment in README.md and docs/ as
// the body of a function, against the current API: a fragment naming a
// field, a function or a type that does not exist fails the test.
func TestDocGoSnippets(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	pkg := filepath.Join(root, "internal", "docsnippets") // only in the overlay
	overlay := map[string]string{}
	add := func(name, src string) {
		file := filepath.Join(tmp, name)
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(pkg, name)] = file
	}
	add("prelude.go", snippetPrelude)
	where := map[string]string{}
	n := 0
	for _, doc := range []string{"README.md", "docs/operations.md", "docs/design.md", "docs/serve.md", "docs/revocation.md"} {
		for i, block := range goBlocks(t, doc) {
			imports := append([]string(nil), snippetImports...)
			if strings.HasPrefix(block, "import (\n") {
				var own string
				own, block, _ = strings.Cut(strings.TrimPrefix(block, "import (\n"), ")\n")
				for _, line := range strings.Split(own, "\n") {
					if line = strings.TrimSpace(line); line != "" && !slices.Contains(imports, line) {
						imports = append(imports, line)
					}
				}
			}
			n++
			name := fmt.Sprintf("snippet%d.go", n)
			where[name] = fmt.Sprintf("%s, Go block %d", doc, i+1)
			add(name, fmt.Sprintf("package docsnippets\n\nimport (\n\t%s\n)\n\nfunc snippet%d() {\n%s}\n",
				strings.Join(imports, "\n\t"), n, block))
		}
	}
	if n < 5 {
		t.Fatalf("found %d Go blocks in the docs, want at least 5", n)
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "-gcflags=-e", "-o", os.DevNull, "./internal/docsnippets")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	bad := 0
	for _, line := range strings.Split(string(out), "\n") {
		file, msg, ok := strings.Cut(line, ": ")
		if !ok || !strings.HasPrefix(file, tmp) {
			continue
		}
		if unusedOnly.MatchString(msg) {
			continue
		}
		bad++
		base, _, _ := strings.Cut(filepath.Base(file), ":")
		src, _ := os.ReadFile(filepath.Join(tmp, base))
		t.Errorf("%s: %s (%s)\n%s", where[base], msg, strings.TrimPrefix(file, tmp+"/"), src)
	}
	if bad == 0 && !unusedOnly.Match(out) {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}
