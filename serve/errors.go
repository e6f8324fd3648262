package serve

import (
	"errors"
	"fmt"
)

// Code says what went wrong, independent of any protocol: each front end
// (serve/resp, serve/httpapi, serve/pgwire) spells a code its own way.
type Code uint8

// Error codes. The zero Code is CodeInternal.
const (
	CodeInternal          Code = iota // an unexpected failure
	CodeNotFound                      // the key does not exist
	CodeExists                        // the key (or, for a restore, the data) exists already
	CodeWrongType                     // the key holds another kind of filter
	CodeFull                          // a filter that may not grow holds its capacity
	CodeGrowthLimit                   // a growing filter cannot grow further
	CodeOOM                           // past Config.MaxMemory
	CodeReadOnly                      // a table-backed set cannot be created, deleted or restored
	CodeNotSet                        // no table-backed set of that name
	CodeLoading                       // the key is being restored
	CodeBadData                       // a restore's data is malformed
	CodeBadOffset                     // a restore's chunk does not continue the data received
	CodeClosed                        // the store is closing
	CodeOutcomeUnknown                // applied, but not made durable
	CodeNoConfirm                     // the set has no confirm query
	CodeRemoveUnsupported             // the filter cannot remove items
	CodeBadArgument                   // a parameter out of range (Error.Param names it)
	CodeLogWrite                      // the log could not take the write; nothing changed
	CodeNoPosition                    // the set does not follow a change feed
	CodeBadPosition                   // a position that cannot be parsed
	CodeAddFailed                     // a table-backed set's gate refused an item
	CodeConfirmFailed                 // the confirm query failed
	CodeClock                         // the server's clock is out of range
)

var codeNames = [...]string{
	CodeInternal:          "internal",
	CodeNotFound:          "not_found",
	CodeExists:            "exists",
	CodeWrongType:         "wrong_type",
	CodeFull:              "full",
	CodeGrowthLimit:       "growth_limit",
	CodeOOM:               "oom",
	CodeReadOnly:          "read_only",
	CodeNotSet:            "not_set",
	CodeLoading:           "loading",
	CodeBadData:           "bad_data",
	CodeBadOffset:         "bad_offset",
	CodeClosed:            "closed",
	CodeOutcomeUnknown:    "outcome_unknown",
	CodeNoConfirm:         "no_confirm",
	CodeRemoveUnsupported: "remove_unsupported",
	CodeBadArgument:       "bad_argument",
	CodeLogWrite:          "log_write",
	CodeNoPosition:        "no_position",
	CodeBadPosition:       "bad_position",
	CodeAddFailed:         "add_failed",
	CodeConfirmFailed:     "confirm_failed",
	CodeClock:             "clock",
}

// String returns the code's name in snake case ("wrong_type").
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Param names the parameter a CodeBadArgument error is about.
type Param uint8

// Parameters.
const (
	ParamNone Param = iota
	ParamErrorRate
	ParamCapacity
	ParamExpansion
	ParamBucketSize
	ParamMaxIterations
	ParamMaxTTL
	ParamGenerations
	ParamExpiry
)

// Error is an error of the keyspace: a Code, the parameter it is about (for
// CodeBadArgument) and a message that names no protocol. Errors are
// compared with errors.Is against the sentinels below, or matched by Code
// with errors.As.
type Error struct {
	Code  Code
	Param Param
	Msg   string
}

func (e *Error) Error() string { return e.Msg }

// CodeOf returns the Code of the *Error err wraps, and CodeInternal when it
// wraps none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Sentinel errors.
var (
	ErrNotFound    = &Error{Code: CodeNotFound, Msg: "not found"}
	ErrExists      = &Error{Code: CodeExists, Msg: "the key exists already"}
	ErrWrongType   = &Error{Code: CodeWrongType, Msg: "the key holds another kind of filter"}
	ErrFull        = &Error{Code: CodeFull, Msg: "the filter is full and may not grow"}
	ErrGrowthLimit = &Error{Code: CodeGrowthLimit, Msg: "the filter cannot grow further"}
	ErrOOM         = &Error{Code: CodeOOM, Msg: "past the memory limit (maxmemory)"}
	ErrSetReadOnly = &Error{Code: CodeReadOnly, Msg: "a table-backed set cannot be created, deleted or restored"}
	ErrNotSet      = &Error{Code: CodeNotSet, Msg: "no such table-backed set"}
	ErrLoading     = &Error{Code: CodeLoading, Msg: "the key is being restored"}
	ErrBadData     = &Error{Code: CodeBadData, Msg: "bad restore data"}
	ErrBadOffset   = &Error{Code: CodeBadOffset, Msg: "restore chunk out of order"}
	ErrClosed      = &Error{Code: CodeClosed, Msg: "server is shutting down"}
	// ErrOutcomeUnknown: a write was applied but could not be made durable
	// (the log's fsync failed and no snapshot followed in time). It is
	// never sent as a reply: RESP and HTTP close the connection without
	// one, so that an error reply keeps meaning nothing changed.
	ErrOutcomeUnknown = &Error{Code: CodeOutcomeUnknown, Msg: "the write's outcome is unknown: the log could not be synced"}
	ErrNoConfirm      = &Error{Code: CodeNoConfirm, Msg: "set has no confirm query"}
	ErrRemoveFailed   = &Error{Code: CodeRemoveUnsupported, Msg: "filter cannot remove keys"}
)

// Parameter range errors. Every parameter is checked here, once, for every
// front end; each spells them its own way (serve/resp with RedisBloom's
// texts).
var (
	ErrBadErrorRate      = &Error{Code: CodeBadArgument, Param: ParamErrorRate, Msg: "error rate must be above 0 and below 1"}
	ErrBadCapacity       = &Error{Code: CodeBadArgument, Param: ParamCapacity, Msg: "capacity must be from 1 to 1073741824"}
	ErrBadExpansion      = &Error{Code: CodeBadArgument, Param: ParamExpansion, Msg: "expansion must be from 0 to 32768"}
	ErrBadBucketSize     = &Error{Code: CodeBadArgument, Param: ParamBucketSize, Msg: "bucket size must be from 1 to 255"}
	ErrBadMaxIterations  = &Error{Code: CodeBadArgument, Param: ParamMaxIterations, Msg: "max iterations must be from 1 to 65535"}
	ErrBadCuckooCapacity = &Error{Code: CodeBadArgument, Param: ParamCapacity, Msg: "capacity must be from 2 × bucket size to 1073741824"}
)

// argError returns a CodeBadArgument *Error about p.
func argError(p Param, msg string) error { return &Error{Code: CodeBadArgument, Param: p, Msg: msg} }

// IsArgError reports whether err is a bad-argument error.
func IsArgError(err error) bool { return CodeOf(err) == CodeBadArgument }
