package resp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/serve"
)

// selfSigned returns a certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bloomgate test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestTLS(t *testing.T) {
	cert := selfSigned(t)
	addr, _ := startServer(t, Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}, serve.Config{})
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool.AddCert(leaf)
	rdb := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.BFAdd(ctx, "k", "a").Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := rdb.BFExists(ctx, "k", "a").Result(); !ok || err != nil {
		t.Errorf("BFExists over TLS = %v, %v", ok, err)
	}
}

// TestIdleTimeout: a connection that sends nothing is closed.
func TestIdleTimeout(t *testing.T) {
	addr, _ := startServer(t, Config{IdleTimeout: 50 * time.Millisecond}, serve.Config{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("idle connection: %v", err)
	}
}
