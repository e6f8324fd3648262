package serve

import "errors"

// Error is an error with the exact text RedisBloom replies with (without the
// RESP "-" prefix) and a stable code for the HTTP API. Errors are compared
// with errors.Is against the sentinels below.
type Error struct {
	// Code is the stable, machine-readable name used by the HTTP API.
	Code string
	// Msg is the reply text on the Redis protocol.
	Msg string
}

func (e *Error) Error() string { return e.Msg }

// Sentinel errors. Their Msg is RedisBloom's reply text, byte for byte where
// RedisBloom defines one.
var (
	ErrNotFound       = &Error{"not_found", "ERR not found"}
	ErrCFNotFound     = &Error{"not_found", "Not found"}
	ErrExists         = &Error{"exists", "ERR item exists"}
	ErrWrongType      = &Error{"wrong_type", "WRONGTYPE Operation against a key holding the wrong kind of value"}
	ErrNonScalingFull = &Error{"full", "ERR non scaling filter is full"}
	ErrBFInsert       = &Error{"full", "ERR problem inserting into filter"}
	ErrCFFull         = &Error{"full", "Filter is full"}
	ErrCFMaxExpansion = &Error{"full", "Maximum expansions reached"}
	ErrOOM            = &Error{"oom", "OOM command not allowed when used memory > 'maxmemory'."}
	ErrSetReadOnly    = &Error{"read_only", "ERR table-backed set cannot be created, deleted or restored"}
	ErrNotSet         = &Error{"not_set", "ERR no such table-backed set"}
	ErrLoading        = &Error{"loading", "ERR filter is being restored with LOADCHUNK"}
	ErrBadData        = &Error{"bad_data", "ERR received bad data"}
	ErrClosed         = &Error{"closed", "ERR server is shutting down"}
	// ErrOutcomeUnknown: a write was applied but could not be made durable
	// (the log's fsync failed and no snapshot followed in time). It is
	// never sent as a reply: RESP and HTTP close the connection without
	// one, so that an error reply keeps meaning nothing changed.
	ErrOutcomeUnknown = &Error{"outcome_unknown", "ERR the write's outcome is unknown: the log could not be synced"}
	ErrNoConfirm      = &Error{"no_confirm", "ERR set has no confirm query"}
	ErrRemoveFailed   = &Error{"remove_unsupported", "ERR filter cannot remove keys"}
)

// Parameter range errors, with BF.RESERVE's and CF.RESERVE's texts. Every
// parameter is checked here, once, for RESP and HTTP alike; a command whose
// RedisBloom text differs (BF.INSERT's "Bad capacity") matches these with
// errors.Is and replies its own.
var (
	ErrBadErrorRate       = &Error{"bad_argument", "ERR error rate must be in the range (0.000000, 1.000000)"}
	ErrBadCapacity        = &Error{"bad_argument", "ERR capacity must be in the range [1, 1073741824]"}
	ErrBadExpansion       = &Error{"bad_argument", "ERR expansion must be in the range [0, 32768]"}
	ErrBadBucketSize      = &Error{"bad_argument", "BUCKETSIZE: value must be in the range [1, 255]"}
	ErrBadMaxIterations   = &Error{"bad_argument", "MAXITERATIONS: value must be in the range [1, 65535]"}
	ErrBadCuckooExpansion = &Error{"bad_argument", "EXPANSION: value must be in the range [0, 32768]"}
	ErrBadCuckooCapacity  = &Error{"bad_argument", "Capacity must be in the range [2 * BUCKETSIZE, 1073741824]"}
)

// argError returns an *Error for a bad argument with RedisBloom's text.
func argError(msg string) error { return &Error{"bad_argument", msg} }

// IsArgError reports whether err is a bad-argument error.
func IsArgError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == "bad_argument"
}
