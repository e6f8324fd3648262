package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
)

func init() {
	registerTransport(TransportJetStream, transportDriver{
		name: "jetstream",
		keys: map[string]func(*FanoutConfig, string) error{
			"nats":          func(f *FanoutConfig, v string) error { f.NATS.URLs = v; return nil },
			"nats-creds":    func(f *FanoutConfig, v string) error { f.NATS.Creds = v; return nil },
			"nats-nkey":     func(f *FanoutConfig, v string) error { f.NATS.NKey = v; return nil },
			"nats-user":     func(f *FanoutConfig, v string) error { f.NATS.User = v; return nil },
			"nats-password": func(f *FanoutConfig, v string) error { f.NATS.Password = v; return nil },
			"nats-token":    func(f *FanoutConfig, v string) error { f.NATS.Token = v; return nil },
			"nats-tls-ca":   func(f *FanoutConfig, v string) error { f.NATS.TLSCA = v; return nil },
			"nats-tls-cert": func(f *FanoutConfig, v string) error { f.NATS.TLSCert = v; return nil },
			"nats-tls-key":  func(f *FanoutConfig, v string) error { f.NATS.TLSKey = v; return nil },
		},
		check: func(f *FanoutConfig) error {
			if f.NATS.URLs == "" {
				return errors.New("fanout jetstream: give nats (a comma-separated list of URLs)")
			}
			return nil
		},
		open: openJetStream,
	})
}

// openJetStream connects to NATS and opens (creating if need be) the set's
// stream, buckets and object store.
func openJetStream(ctx context.Context, s *SetConfig, key []byte, log *slog.Logger) (fanout.Backend, []func(), error) {
	timeout := s.connectTimeout()
	n := s.Fanout.NATS
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{
		URLs: splitList(n.URLs), Creds: n.Creds, NKey: n.NKey,
		User: n.User, Password: n.Password, Token: n.Token,
		TLSCA: n.TLSCA, TLSCert: n.TLSCert, TLSKey: n.TLSKey,
		Timeout: timeout, Name: "bloomgate serve " + s.Name,
	})
	if err != nil {
		return fanout.Backend{}, nil, fmt.Errorf("set %q: nats: %w", s.Name, timeoutHint(err, ctx, timeout))
	}
	closers := []func(){conn.Close}
	set, err := jetstream.Open(ctx, jetstream.Config{JetStream: conn.JetStream(), Set: s.Name,
		Replicas: s.Fanout.Replicas, LeaseTTL: s.Fanout.LeaseTTL, Key: key, Logger: log})
	if err != nil {
		return fanout.Backend{}, closers, fmt.Errorf("set %q: nats: %w", s.Name, timeoutHint(err, ctx, timeout))
	}
	return set.Backend(), closers, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
