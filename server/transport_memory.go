package server

import (
	"context"
	"log/slog"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/memlog"
)

func init() {
	registerTransport(TransportMemory, transportDriver{name: "memory", open: openMemory})
}

// openMemory returns the set's in-process log: MemoryConfig.Set, or one of
// this server's own (its feeder and its instance share it).
func openMemory(_ context.Context, s *SetConfig, key []byte, log *slog.Logger) (fanout.Backend, []func(), error) {
	set := s.Fanout.Memory.Set
	if set == nil {
		set = memlog.New(memlog.Config{Set: s.Name, LeaseTTL: s.Fanout.LeaseTTL, Key: key})
	}
	b := set.Backend()
	b.Key, b.Logger = key, log // the set's key, also for a shared Set
	return b, nil, nil
}
