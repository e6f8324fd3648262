package resp

import (
	"fmt"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// TestErrorTexts pins the reply bytes for every keyspace error code in the
// command families that spell it differently: RedisBloom's texts where it
// has one, ours (with Redis' "ERR " prefix) otherwise.
func TestErrorTexts(t *testing.T) {
	for _, tt := range []struct {
		cmd  string
		err  error
		want string
	}{
		{"bf.info", serve.ErrNotFound, "ERR not found"},
		{"cf.info", serve.ErrNotFound, "ERR not found"},
		{"cf.del", serve.ErrNotFound, "Not found"},
		{"bf.reserve", serve.ErrExists, "ERR item exists"},
		{"cf.add", serve.ErrWrongType, "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"bf.add", serve.ErrFull, "ERR non scaling filter is full"},
		{"bf.add", serve.ErrGrowthLimit, "ERR problem inserting into filter"},
		{"cf.add", serve.ErrFull, "Filter is full"},
		{"cf.insert", serve.ErrGrowthLimit, "Maximum expansions reached"},
		{"bg.xadd", &serve.Error{Code: serve.CodeFull, Msg: "filter: full"}, "ERR filter: full"},
		{"bf.add", serve.ErrOOM, "OOM command not allowed when used memory > 'maxmemory'."},
		{"del", serve.ErrSetReadOnly, "ERR table-backed set cannot be created, deleted or restored"},
		{"bg.exists", serve.ErrNotSet, "ERR no such table-backed set"},
		{"bf.add", serve.ErrLoading, "ERR filter is being restored with LOADCHUNK"},
		{"bf.loadchunk", serve.ErrBadData, "ERR received bad data"},
		{"bf.loadchunk", serve.ErrBadOffset, "ERR invalid offset - no link found"},
		{"bf.add", serve.ErrClosed, "ERR server is shutting down"},
		{"bg.exists", serve.ErrNoConfirm, "ERR set has no confirm query"},
		{"cf.del", serve.ErrRemoveFailed, "ERR filter cannot remove keys"},
		{"bf.existsat", serve.ErrNoPosition, "ERR set does not follow a change feed (follow no): it has no position; use BG.EXISTS"},
		{"bf.existsat", serve.ErrBadPosition, "ERR position is not a decimal integer"},
		{"bf.add", serve.ErrLogWrite, "MISCONF Errors writing to the AOF file"},
		{"bf.add", fmt.Errorf("%w: no space left on device", serve.ErrLogWrite), "MISCONF Errors writing to the AOF file: no space left on device"},
		{"bf.add", &serve.Error{Code: serve.CodeAddFailed, Msg: "key refused"}, "ERR key refused"},
		{"bg.exists", &serve.Error{Code: serve.CodeConfirmFailed, Msg: "confirm query failed: x"}, "ERR confirm query failed: x"},
		{"bf.reserve", serve.ErrBadErrorRate, "ERR error rate must be in the range (0.000000, 1.000000)"},
		{"bg.xreserve", serve.ErrBadErrorRate, "ERR error rate must be in the range (0.000000, 1.000000)"},
		{"bf.reserve", serve.ErrBadCapacity, "ERR capacity must be in the range [1, 1073741824]"},
		{"bg.xreserve", serve.ErrBadCapacity, "ERR capacity must be in the range [1, 1073741824]"},
		{"bf.reserve", serve.ErrBadExpansion, "ERR expansion must be in the range [0, 32768]"},
		{"cf.reserve", serve.ErrBadExpansion, "EXPANSION: value must be in the range [0, 32768]"},
		{"cf.reserve", serve.ErrBadCuckooCapacity, "Capacity must be in the range [2 * BUCKETSIZE, 1073741824]"},
		{"cf.reserve", serve.ErrBadBucketSize, "BUCKETSIZE: value must be in the range [1, 255]"},
		{"cf.reserve", serve.ErrBadMaxIterations, "MAXITERATIONS: value must be in the range [1, 65535]"},
		{"bg.xadd", serve.ErrExpiryPast, "ERR expiry is in the past"},
		{"bg.xadd", serve.ErrExpiryBeyondTTL, "ERR expiry is further ahead than the key's max TTL"},
		{"bg.xreserve", serve.ErrTooLargeFilter, "ERR filter would exceed the largest filter the server stores"},
		{"bf.add", fmt.Errorf("plain"), "ERR plain"},
	} {
		if got := errorText(tt.cmd, tt.err); got != tt.want {
			t.Errorf("%s, %v: %q, want %q", tt.cmd, tt.err, got, tt.want)
		}
	}
}

// TestTypeNames: TYPE's replies.
func TestTypeNames(t *testing.T) {
	for k, want := range map[serve.Kind]string{
		serve.KindNone: "none", serve.KindBloom: "MBbloom--", serve.KindSet: "MBbloom--",
		serve.KindCuckoo: "MBbloomCF", serve.KindExpiring: "BGexpire-",
	} {
		if got := typeName(k); got != want {
			t.Errorf("typeName(%v) = %q, want %q", k, got, want)
		}
	}
}
