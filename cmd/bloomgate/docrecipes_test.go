package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// docBlock returns the first fenced code block of language lang after the
// line starting with heading in the file at path (relative to the
// repository root), as written.
func docBlock(t *testing.T, path, heading, lang string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found, in := false, false
	var b strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found:
			found = strings.HasPrefix(line, heading)
		case !in:
			in = line == "```"+lang
		case line == "```":
			return b.String()
		default:
			b.WriteString(line + "\n")
		}
	}
	t.Fatalf("%s: no ```%s block after %q", path, lang, heading)
	return ""
}

// atPort points a recipe written for the default port 6380 at port.
func atPort(t *testing.T, block, port string) string {
	t.Helper()
	if !strings.Contains(block, "6380") {
		t.Fatalf("the recipe does not name port 6380:\n%s", block)
	}
	return strings.ReplaceAll(block, "6380", port)
}

// runRecipe writes prelude + the recipe + driver to a file and runs it with
// prog; the driver exits non-zero on a failed check.
func runRecipe(t *testing.T, prog, ext, prelude, recipe, driver string, args ...string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "recipe"+ext)
	if err := os.WriteFile(path, []byte(prelude+recipe+driver), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(prog, append([]string{path}, args...)...).CombinedOutput()
	t.Logf("%s:\n%s", prog, out)
	if err != nil {
		t.Fatalf("the recipe failed: %v", err)
	}
}

func phpRedis(t *testing.T) string {
	t.Helper()
	return testsvc.PHPExtension(t, "redis", "php-redis")
}

// phpChecks are the driver's helpers: check, and refused, which calls f and
// wants it to throw with want in the message.
const phpChecks = `
function check(bool $ok, string $what): void
{
    if (!$ok) {
        fwrite(STDERR, "FAIL: $what\n");
        exit(1);
    }
    echo "ok: $what\n";
}
function refused(callable $f, string $want, string $what): void
{
    try {
        $f();
    } catch (Throwable $e) {
        check(strpos($e->getMessage(), $want) !== false, "$what: threw " . $e->getMessage());
        return;
    }
    check(false, "$what: returned normally, the error reply passed in silence");
}
`

const pyChecks = `
import sys
import redis


def check(ok, what):
    if not ok:
        sys.exit("FAIL: " + what)
    print("ok: " + what)


def refused(f, want, what):
    try:
        f()
    except redis.RedisError as e:  # ResponseError, and AuthenticationError for -NOAUTH
        check(want in str(e), "%s: raised %s" % (what, e))
        return
    check(False, what + ": returned normally, the error reply passed in silence")

`

// TestDocRecipesRevocation runs the JWT revocation recipes of
// docs/revocation.md as written (only the port changed) against the built
// binary: a logout revokes, a live token is accepted, a token that expired
// meanwhile is no error, and a refused logout (an expiry past the key's max
// TTL) and a refused lookup (a key of the wrong type) are errors the caller
// sees.
func TestDocRecipesRevocation(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	addr := freeAddr(t)
	startServe(t, bin, "-resp", addr, "-http", "", "-data", t.TempDir())
	_, port, _ := net.SplitHostPort(addr)

	t.Run("PHP", func(t *testing.T) {
		php := phpRedis(t)
		recipe := atPort(t, docBlock(t, "docs/revocation.md", "## Recipe: JWT revocation (PHP", "php"), port)
		runRecipe(t, php, ".php", "<?php\n", recipe, phpChecks+`
$redis->rawCommand('DEL', 'revoked');
$redis->rawCommand('BG.XRESERVE', 'revoked', '0.001', 10000, 60);
$tok = ['jti' => 'tok-1', 'exp' => time() + 30];
logout($redis, $tok);
check(is_revoked($redis, $tok), 'a revoked token is refused');
check(!is_revoked($redis, ['jti' => 'tok-live', 'exp' => time() + 30]), 'a live token is accepted');
$last = ['jti' => 'tok-last', 'exp' => time()];
logout($redis, $last); // in its expiry second: the server may refuse it as in the past
check(is_revoked($redis, $last), 'a token in its expiry second is refused');
logout($redis, ['jti' => 'tok-old', 'exp' => time() - 5]);
check(true, 'a logout of a token that expired meanwhile is no error');
refused(fn() => logout($redis, ['jti' => 'tok-long', 'exp' => time() + 3600]), "max TTL", 'a logout past the max TTL');
check(!is_revoked($redis, ['jti' => 'tok-long', 'exp' => time() + 30]), 'the refused logout revoked nothing');
$redis->rawCommand('DEL', 'revoked');
$redis->rawCommand('BF.ADD', 'revoked', 'x');
refused(fn() => is_revoked($redis, $tok), 'WRONGTYPE', 'a lookup on a key of the wrong type');
`)
	})
	t.Run("Python", func(t *testing.T) {
		py := python(t)
		recipe := atPort(t, docBlock(t, "docs/revocation.md", "## Recipe: JWT revocation (Python", "python"), port)
		runRecipe(t, py, ".py", "", recipe, pyChecks+`
r.delete("revoked")
r.execute_command("BG.XRESERVE", "revoked", "0.001", 10000, 60)
tok = {"jti": "tok-1", "exp": int(time.time()) + 30}
logout(tok)
check(is_revoked(tok), "a revoked token is refused")
check(not is_revoked({"jti": "tok-live", "exp": int(time.time()) + 30}), "a live token is accepted")
last = {"jti": "tok-last", "exp": int(time.time())}
logout(last)  # in its expiry second: the server may refuse it as in the past
check(is_revoked(last), "a token in its expiry second is refused")
logout({"jti": "tok-old", "exp": int(time.time()) - 5})
check(True, "a logout of a token that expired meanwhile is no error")
refused(lambda: logout({"jti": "tok-long", "exp": int(time.time()) + 3600}), "max TTL", "a logout past the max TTL")
check(not is_revoked({"jti": "tok-long", "exp": int(time.time()) + 30}), "the refused logout revoked nothing")
r.delete("revoked")
r.execute_command("BF.ADD", "revoked", "x")
refused(lambda: is_revoked(tok), "WRONGTYPE", "a lookup on a key of the wrong type")
`)
	})
}

// TestDocRecipesClients runs the client recipes of docs/serve.md (Clients)
// and the README's serve quick start as written (only the port changed)
// against the built binary with requirepass and an SQLite-backed set
// "users": each answers right, and on a connection that has not
// authenticated (redis-py), or against a server where "users" is a
// cuckoo key and "revoked" a Bloom key (phpredis, which throws on -NOAUTH
// but returns false on other error replies), every function surfaces the
// error reply.
func TestDocRecipesClients(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := t.TempDir()
	dbPath := sqliteUsers(t, dir, 100)
	conf, respAddr, _ := serveConf(t, dir, fmt.Sprintf(`requirepass s3cret
set users {
  sqlite %s
  follow no
  table users
  column email
  confirm SELECT 1 FROM users WHERE email = lower(trim(?))
  normalize lowertrim
}
`, dbPath))
	startServe(t, bin, "-config", conf)
	host, port, _ := net.SplitHostPort(respAddr)
	otherAddr := freeAddr(t)
	startServe(t, bin, "-resp", otherAddr, "-http", "", "-data", t.TempDir())
	_, otherPort, _ := net.SplitHostPort(otherAddr)

	t.Run("serve.md PHP", func(t *testing.T) {
		php := phpRedis(t)
		recipe := atPort(t, docBlock(t, "docs/serve.md", "## Clients", "php"), port)
		runRecipe(t, php, ".php", "<?php\n", recipe, phpChecks+`
[, $host, $port] = $argv;
check(!email_available($redis, ' U5@example.com'), 'a registered address is taken');
check(email_available($redis, 'new@example.com'), 'a new address is free');
register($redis, 'new@example.com');
$redis->rawCommand('DEL', 'revoked');
$redis->rawCommand('CF.RESERVE', 'revoked', 1000);
revoke($redis, 'tok-1');
check(is_revoked($redis, 'tok-1'), 'a revoked token is revoked');
revoke($redis, 'tok-3');
unrevoke($redis, 'tok-1', 1);
check(!is_revoked($redis, 'tok-1'), 'an unrevoked token is not');
unrevoke($redis, 'tok-1', 0); // unrevoked twice: the second deleted no row
check(is_revoked($redis, 'tok-3'), 'another revoked token stays revoked');
// phpredis throws on -NOAUTH but returns false on other error replies:
// a server whose "users" is a cuckoo key and "revoked" a Bloom key
// answers every function with one.
$other = new Redis();
$other->connect($host, (int) $argv[3]);
$other->rawCommand('CF.ADD', 'users', 'x');
$other->rawCommand('BF.ADD', 'revoked', 'x');
refused(fn() => email_available($other, 'new@example.com'), 'ERR', 'email_available on a key that is no set');
refused(fn() => register($other, 'new@example.com'), 'WRONGTYPE', 'register on a cuckoo key');
refused(fn() => revoke($other, 'tok-2'), 'WRONGTYPE', 'revoke on a Bloom key');
// CF.EXISTS on a key of another kind answers 0, as RedisBloom's does.
$anon = new Redis();
$anon->connect($host, (int) $port);
refused(fn() => is_revoked($anon, 'x'), 'NOAUTH', 'is_revoked without AUTH');
refused(fn() => unrevoke($other, 'x', 1), 'WRONGTYPE', 'unrevoke on a Bloom key');
`, host, port, otherPort)
	})
	pyDriver := `
check(find_user("u5@example.com") is not None, "a registered user is found")
check(find_user("nobody@example.com") is None, "an unknown user is not")
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))  # no password
refused(lambda: find_user("u5@example.com"), "Authentication required", "find_user without AUTH (-NOAUTH)")
`
	pyPrelude := fmt.Sprintf("import sqlite3\nimport redis\ndb = sqlite3.connect(%q)\n", dbPath)
	for _, c := range []struct{ name, path, heading string }{
		{"serve.md Python", "docs/serve.md", "## Clients"},
		{"README Python", "README.md", "## Quick start: serve"},
	} {
		t.Run(c.name, func(t *testing.T) {
			py := python(t)
			recipe := atPort(t, docBlock(t, c.path, c.heading, "python"), port)
			runRecipe(t, py, ".py", pyPrelude, recipe, pyChecks+pyDriver, host, port)
		})
	}
}

// TestDocRecipesReadYourWrites runs the read-your-writes recipes of
// docs/serve.md as written (port changed) against the built binary
// following a PostgreSQL table, on connections with synchronous_commit =
// off: 200 times each, the row just committed is never answered absent;
// and pointed at a server that has no set "users", the recipe surfaces the
// error reply instead of an answer.
func TestDocRecipesReadYourWrites(t *testing.T) {
	testsvc.Short(t, "starts a PostgreSQL cluster and the server")
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	dir := t.TempDir()
	conf, respAddr, httpAddr := serveConf(t, dir, fmt.Sprintf(`requirepass s3cret
set users {
  postgres %s
  table users
  column email
  slot bg_users
  publication bg_users
  confirm SELECT 1 FROM users WHERE email = $1
  kind cuckoo
}
`, pg.DSN))
	startServe(t, bin, "-config", conf)
	waitReadyz(t, httpAddr, 30*time.Second)
	_, port, _ := net.SplitHostPort(respAddr)
	otherDir := t.TempDir()
	otherConf, otherAddr, _ := serveConf(t, otherDir, "requirepass s3cret\n")
	startServe(t, bin, "-config", otherConf)
	_, otherPort, _ := net.SplitHostPort(otherAddr)

	t.Run("PHP", func(t *testing.T) {
		php := phpRedis(t)
		testsvc.PHPExtension(t, "pdo_pgsql", "php-pgsql")
		clients := atPort(t, docBlock(t, "docs/serve.md", "## Clients", "php"), port) // bg()
		block := docBlock(t, "docs/serve.md", "## Read your writes", "php")
		prelude := fmt.Sprintf("<?php\n$pdo = new PDO('pgsql:host=%s;port=%d;dbname=%s;user=%s');\n"+
			"$pdo->setAttribute(PDO::ATTR_ERRMODE, PDO::ERRMODE_EXCEPTION);\n$pdo->exec('SET synchronous_commit = off');\n",
			pg.Host, pg.Port, pg.Database, pg.User)
		driver := phpChecks + `
$absent = 0;
for ($i = 0; $i < 200; $i++) {
    $email = "php-$i@example.com";
` + atPort(t, block, port) + `
    if ($taken != 1) {
        $absent++;
    }
}
check($absent == 0, "$absent of 200 rows just committed answered absent");
$email = 'php-refused@example.com';
try {
` + atPort(t, block, otherPort) + `
} catch (RuntimeException $e) {
    check(strpos($e->getMessage(), 'no such table-backed set') !== false, 'on a server without the set: threw ' . $e->getMessage());
    exit(0);
}
check(false, 'on a server without the set: the error reply passed in silence');
`
		runRecipe(t, php, ".php", prelude, clients, driver)
	})
	t.Run("Python", func(t *testing.T) {
		py := python(t)
		testsvc.PythonModule(t, "python3-psycopg", "psycopg")
		block := docBlock(t, "docs/serve.md", "## Read your writes", "python")
		indent := func(s string) string {
			return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
		}
		prelude := fmt.Sprintf("import psycopg\nimport redis\nconn = psycopg.connect(%q, autocommit=True)\n"+
			"conn.execute(\"SET synchronous_commit = off\")\n", pg.DSN)
		driver := pyChecks + `
absent = 0
for i in range(200):
    email = "py-%d@example.com" % i
` + indent(atPort(t, block, port)) + `
    if taken != 1:
        absent += 1
check(absent == 0, "%d of 200 rows just committed answered absent" % absent)
email = "py-refused@example.com"


def other():
` + indent(atPort(t, block, otherPort)) + `

refused(other, "no such table-backed set", "on a server without the set")
`
		runRecipe(t, py, ".py", prelude, "", driver)
	})
}
