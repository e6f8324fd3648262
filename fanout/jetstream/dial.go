package jetstream

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate/internal/defaults"
)

// DialConfig says how to reach a NATS cluster, with the credentials and TLS
// files nats.go takes. The zero value of every field but URLs means its
// default (no credentials, TLS only as the URLs' tls:// scheme asks).
type DialConfig struct {
	// URLs lists the servers, such as "nats://10.0.0.1:4222". Required.
	URLs []string
	// Creds is a user credentials file (JWT and NKey seed), NKey an NKey
	// seed file; User and Password, or Token, authenticate otherwise.
	Creds, NKey           string
	User, Password, Token string
	// TLSCA verifies the servers' certificates; TLSCert and TLSKey are the
	// client's certificate, for servers that verify clients.
	TLSCA, TLSCert, TLSKey string
	// Timeout bounds the first connection. Default: 5 s. Once connected, the
	// client reconnects by itself, forever.
	Timeout time.Duration
	// Name names the connection in the servers' monitoring. Default:
	// "bloomgate".
	Name string
}

// Conn is a NATS connection with its JetStream context.
type Conn struct {
	nc *nats.Conn
	js js.JetStream
}

// Dial connects to NATS and checks that JetStream answers, both within
// cfg.Timeout: an unreachable server, refused credentials or a server
// without JetStream is an error, never a wait.
func Dial(ctx context.Context, cfg DialConfig) (*Conn, error) {
	if len(cfg.URLs) == 0 {
		return nil, fmt.Errorf("%w: DialConfig.URLs is required", ErrInvalidConfig)
	}
	defaults.Set(&cfg.Timeout, 5*time.Second)
	defaults.Set(&cfg.Name, "bloomgate")
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(cfg.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	switch {
	case cfg.Creds != "":
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	case cfg.NKey != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NKey)
		if err != nil {
			return nil, fmt.Errorf("jetstream: nkey %s: %w", cfg.NKey, err)
		}
		opts = append(opts, o)
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	urls := strings.Join(cfg.URLs, ",")
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w", urls, err)
	}
	j, err := js.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if _, err := j.AccountInfo(actx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %s answers, but not JetStream (is it enabled?): %w", urls, err)
	}
	return &Conn{nc: nc, js: j}, nil
}

// JetStream returns the connection's JetStream context, for Config.JetStream.
func (c *Conn) JetStream() js.JetStream { return c.js }

// Close closes the connection.
func (c *Conn) Close() { c.nc.Close() }
