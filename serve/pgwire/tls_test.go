package pgwire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// testCert is a self-signed certificate for 127.0.0.1, with its PEM file.
type testCert struct {
	cert tls.Certificate
	file string // the certificate, PEM: a client's sslrootcert
}

func newTestCert(t *testing.T) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "bloomgate pgwire test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IsCA:         true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "root.crt")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return testCert{cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, file: file}
}

// withSSL returns the URL dsn with its sslmode set to mode and params
// (key=value) added.
func withSSL(dsn, mode string, params ...string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set("sslmode", mode)
	for _, p := range params {
		k, v, _ := strings.Cut(p, "=")
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestClientTLS: clients' SSLRequest is accepted with the configured
// certificate: pgx, psql and psycopg2 with sslmode=require and verify-full
// connect over TLS and get the same answers (local ones included); a
// certificate from another CA fails verify-full; without a certificate,
// require is refused and prefer goes on in plain text.
func TestClientTLS(t *testing.T) {
	cert := newTestCert(t)
	f := newFrontEnd(t, func(c *Config) {
		c.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert.cert}, MinVersion: tls.VersionTLS12}
	})
	ctx := context.Background()
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"

	for _, mode := range []string{"require", "verify-full"} {
		t.Run("pgx-"+mode, func(t *testing.T) {
			c, err := pgx.Connect(ctx, withSSL(f.front, mode, "sslrootcert="+cert.file))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			if _, ok := c.PgConn().Conn().(*tls.Conn); !ok {
				t.Fatalf("connection is %T, not TLS", c.PgConn().Conn())
			}
			before := f.count(t, "bloomgate_pgwire_answered_total")
			var n int
			if err := c.QueryRow(ctx, q, "k3").Scan(new(string), &n); err != nil || n != 3 {
				t.Fatalf("present key over TLS: %d %v", n, err)
			}
			for i := range 3 {
				if err := c.QueryRow(ctx, q, fmt.Sprintf("tls-absent-%s-%d", mode, i)).Scan(new(string), &n); err != pgx.ErrNoRows {
					t.Fatalf("absent key over TLS: %v", err)
				}
			}
			if got := f.count(t, "bloomgate_pgwire_answered_total") - before; got < 1 {
				t.Errorf("no absent-key lookup over TLS was answered locally")
			}
		})
	}
	t.Run("verify-full-other-ca", func(t *testing.T) {
		other := newTestCert(t)
		_, err := pgx.Connect(ctx, withSSL(f.front, "verify-full", "sslrootcert="+other.file))
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("verify-full against another CA: %v, want a certificate error", err)
		}
	})
	t.Run("psql", func(t *testing.T) {
		if _, err := exec.LookPath("psql"); err != nil {
			testsvc.Unavailable(t, "psql: %v", err)
		}
		for _, mode := range []string{"require", "verify-full"} {
			out, err := exec.Command("psql", "-X", "-At", withSSL(f.front, mode, "sslrootcert="+cert.file),
				"-c", `\conninfo`, "-c", "SELECT count(*) FROM "+f.table+" WHERE email IN ('k1', 'k2')",
				"-c", "SELECT email FROM "+f.table+" WHERE email = 'psql-absent'").CombinedOutput()
			if err != nil {
				t.Fatalf("psql sslmode=%s: %v\n%s", mode, err, out)
			}
			if !strings.Contains(string(out), "SSL connection (protocol: TLS") || !strings.Contains(string(out), "\n2\n") {
				t.Errorf("psql sslmode=%s:\n%s", mode, out)
			}
		}
	})
	t.Run("psycopg2", func(t *testing.T) {
		py := testsvc.PythonModule(t, "python3-psycopg2", "psycopg2")
		script := `import psycopg2, sys
c = psycopg2.connect(sys.argv[1])
cur = c.cursor()
print(c.info.ssl_in_use, c.info.ssl_attribute("protocol")[:3])
for k in ("k4", "py-absent"):
    cur.execute(sys.argv[2], (k,))
    print(cur.fetchall())
`
		for _, mode := range []string{"require", "verify-full"} {
			out, err := exec.Command(py, "-c", script, withSSL(f.front, mode, "sslrootcert="+cert.file),
				"SELECT email, n FROM public."+f.table+" WHERE email = %s").CombinedOutput()
			if err != nil {
				t.Fatalf("psycopg2 sslmode=%s: %v\n%s", mode, err, out)
			}
			if want := "True TLS\n[('k4', 4)]\n[]\n"; string(out) != want {
				t.Errorf("psycopg2 sslmode=%s: %q, want %q", mode, out, want)
			}
		}
	})
	t.Run("gssenc-then-ssl", func(t *testing.T) {
		// GSSENCRequest is answered 'N'; the client may then ask for TLS,
		// as libpq does with gssencmode=prefer.
		c, err := net.Dial("tcp", f.srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		for _, step := range []struct {
			req  interface{ Encode([]byte) ([]byte, error) }
			want byte
		}{{&pgproto3.GSSEncRequest{}, 'N'}, {&pgproto3.SSLRequest{}, 'S'}} {
			req, _ := step.req.Encode(nil)
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, b[:]); err != nil {
				t.Fatal(err)
			}
			if b[0] != step.want {
				t.Fatalf("%T answered %q, want %q", step.req, b[0], step.want)
			}
		}
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS after GSSENCRequest 'N': %v", err)
		}
	})
	t.Run("data-after-ssl-request", func(t *testing.T) {
		// Bytes sent with the SSLRequest, before the server's answer, are
		// refused as PostgreSQL refuses them.
		c, err := net.Dial("tcp", f.srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f, 'x', 'y', 'z'})
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		if len(b) == 0 || b[0] != 'E' || !strings.Contains(string(b), "unencrypted data after SSL request") {
			t.Errorf("got %q, want an ErrorResponse", b)
		}
	})

	t.Run("no-certificate", func(t *testing.T) {
		plain := newFrontEnd(t)
		_, err := pgx.Connect(ctx, withSSL(plain.front, "require"))
		if err == nil {
			t.Fatal("sslmode=require connected to a front end without a certificate")
		}
		c, err := pgx.Connect(ctx, withSSL(plain.front, "prefer"))
		if err != nil {
			t.Fatalf("sslmode=prefer: %v", err)
		}
		defer c.Close(ctx)
		if _, ok := c.PgConn().Conn().(*tls.Conn); ok {
			t.Error("sslmode=prefer got TLS from a front end without a certificate")
		}
	})
}

// upstreamSSL reports whether the session's upstream connection is TLS, as
// the upstream sees it.
func upstreamSSL(t *testing.T, dsn string) (bool, error) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	defer c.Close(ctx)
	var ssl bool
	err = c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
	return ssl, err
}

// TestUpstreamTLS: the upstream URL's sslmode is honoured: require and
// verify-ca connect over TLS (the upstream's pg_stat_ssl says so), a
// verify-ca against the wrong root fails the session, host:port is plain
// text; cancel requests reach the backend over TLS too.
func TestUpstreamTLS(t *testing.T) {
	base := newFrontEnd(t)
	ctx := context.Background()
	direct, err := pgx.Connect(ctx, base.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	var ssl string
	if err := direct.QueryRow(ctx, "SHOW ssl").Scan(&ssl); err != nil || ssl != "on" {
		testsvc.Unavailable(t, "the test PostgreSQL has ssl = %q (%v): upstream TLS cannot be tested", ssl, err)
	}
	addr := net.JoinHostPort(direct.Config().Host, fmt.Sprint(direct.Config().Port))
	if got, err := upstreamSSL(t, base.front); err != nil || got {
		t.Fatalf("host:port upstream: ssl %v, %v; want plain text", got, err)
	}
	for _, mode := range []string{"require", "prefer"} {
		f := newFrontEnd(t, func(c *Config) { c.Upstream = "postgres://" + addr + "/?sslmode=" + mode })
		if got, err := upstreamSSL(t, f.front); err != nil || !got {
			t.Errorf("sslmode=%s upstream: ssl %v, %v; want TLS", mode, got, err)
		}
	}
	t.Run("verify-ca-wrong-root", func(t *testing.T) {
		other := newTestCert(t)
		f := newFrontEnd(t, func(c *Config) {
			c.Upstream = "postgres://" + addr + "/?sslmode=verify-ca&sslrootcert=" + other.file
		})
		_, err := upstreamSSL(t, f.front)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("verify-ca against the wrong root: %v, want an error naming the certificate", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		f := newFrontEnd(t, func(c *Config) { c.Upstream = "postgres://" + addr + "/?sslmode=require" })
		c, err := pgx.Connect(ctx, f.front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		go func() {
			time.Sleep(300 * time.Millisecond)
			c.PgConn().CancelRequest(ctx)
		}()
		_, err = c.Exec(ctx, "SELECT pg_sleep(20)")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" {
			t.Fatalf("cancel over a TLS upstream: %v, want 57014", err)
		}
	})
}

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in          string
		addr        string
		tls, prefer bool
		err         string
	}{
		{in: "127.0.0.1:5432", addr: "127.0.0.1:5432"},
		{in: "db.example:6432", addr: "db.example:6432"},
		{in: "postgres://db.example:6000/app?sslmode=disable", addr: "db.example:6000"},
		{in: "postgres://db.example/?sslmode=require", addr: "db.example:5432", tls: true},
		{in: "postgres://db.example/?sslmode=prefer", addr: "db.example:5432", tls: true, prefer: true},
		{in: "postgres://db.example/?sslmode=verify-full", addr: "db.example:5432", tls: true},
		{in: "host=10.0.0.1 port=5433 sslmode=require", addr: "10.0.0.1:5433", tls: true},
		{in: "127.0.0.1", err: "want host:port"},
		{in: "127.0.0.1:99999", err: "bad port"},
		{in: "postgres://db.example/?sslmode=sometimes", err: "sslmode is invalid"},
		{in: "postgres://db.example/?sslmode=verify-full&sslrootcert=/nonexistent.pem", err: "CA file"},
		{in: "postgres://db.example/?sslnegotiation=direct&sslmode=require", err: "sslnegotiation=direct"},
	} {
		u, err := parseUpstream(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || u.addr != tc.addr || (u.tls != nil) != tc.tls || u.prefer != tc.prefer {
			t.Errorf("%q: %+v %v, want addr %s tls %v prefer %v", tc.in, u, err, tc.addr, tc.tls, tc.prefer)
		}
	}
}
