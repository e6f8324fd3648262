package resp

import (
	"errors"
	"strings"

	"github.com/bloomgate/bloomgate/serve"
)

// RedisBloom's reply texts (and Redis' own where the keyspace error is
// Redis', as WRONGTYPE and OOM), keyed by the keyspace's error codes. The
// core returns codes; the texts are the protocol's, so they live here.
var codeText = map[serve.Code]string{
	serve.CodeNotFound:          "ERR not found",
	serve.CodeExists:            "ERR item exists",
	serve.CodeWrongType:         "WRONGTYPE Operation against a key holding the wrong kind of value",
	serve.CodeOOM:               "OOM command not allowed when used memory > 'maxmemory'.",
	serve.CodeReadOnly:          "ERR table-backed set cannot be created, deleted or restored",
	serve.CodeNotSet:            "ERR no such table-backed set",
	serve.CodeLoading:           "ERR filter is being restored with LOADCHUNK",
	serve.CodeBadData:           "ERR received bad data",
	serve.CodeBadOffset:         "ERR invalid offset - no link found",
	serve.CodeClosed:            "ERR server is shutting down",
	serve.CodeOutcomeUnknown:    "ERR the write's outcome is unknown: the log could not be synced",
	serve.CodeNoConfirm:         "ERR set has no confirm query",
	serve.CodeRemoveUnsupported: "ERR filter cannot remove keys",
	serve.CodeNoPosition:        "ERR set does not follow a change feed (follow no): it has no position; use BG.EXISTS",
}

// logWriteText is Redis' reply when its append-only file cannot be written.
const logWriteText = "MISCONF Errors writing to the AOF file"

// family is the command family a reply is for: RedisBloom spells some
// errors differently in BF.* and CF.* commands.
type family uint8

const (
	familyOther family = iota
	familyBloom
	familyCuckoo
)

func familyOf(cmd string) family {
	switch {
	case strings.HasPrefix(cmd, "bf."):
		return familyBloom
	case strings.HasPrefix(cmd, "cf."):
		return familyCuckoo
	}
	return familyOther
}

// errorText returns the reply text for err, answering the command cmd
// (lower case; "" outside a command).
func errorText(cmd string, err error) string {
	var se *serve.Error
	if !errors.As(err, &se) {
		return "ERR " + err.Error()
	}
	fam := familyOf(cmd)
	switch se.Code {
	case serve.CodeNotFound:
		if cmd == "cf.del" {
			return "Not found"
		}
	case serve.CodeFull:
		switch fam {
		case familyBloom:
			return "ERR non scaling filter is full"
		case familyCuckoo:
			return "Filter is full"
		}
	case serve.CodeGrowthLimit:
		switch fam {
		case familyBloom:
			return "ERR problem inserting into filter"
		case familyCuckoo:
			return "Maximum expansions reached"
		}
	case serve.CodeLogWrite:
		// With the cause: why the log failed.
		if full := err.Error(); se == serve.ErrLogWrite && strings.HasPrefix(full, se.Msg) {
			return logWriteText + full[len(se.Msg):]
		}
		return logWriteText
	case serve.CodeBadArgument:
		if t := paramText(fam, se.Param); t != "" {
			return t
		}
	}
	if t, ok := codeText[se.Code]; ok {
		return t
	}
	return "ERR " + se.Msg
}

// paramText is BF.RESERVE's and CF.RESERVE's text for a parameter out of
// range ("" for parameters of our own commands: their message is the
// text).
func paramText(fam family, p serve.Param) string {
	switch p {
	case serve.ParamErrorRate:
		return "ERR error rate must be in the range (0.000000, 1.000000)"
	case serve.ParamCapacity:
		if fam == familyCuckoo {
			return "Capacity must be in the range [2 * BUCKETSIZE, 1073741824]"
		}
		return "ERR capacity must be in the range [1, 1073741824]"
	case serve.ParamExpansion:
		if fam == familyCuckoo {
			return "EXPANSION: value must be in the range [0, 32768]"
		}
		return "ERR expansion must be in the range [0, 32768]"
	case serve.ParamBucketSize:
		return "BUCKETSIZE: value must be in the range [1, 255]"
	case serve.ParamMaxIterations:
		return "MAXITERATIONS: value must be in the range [1, 65535]"
	}
	return ""
}

// typeName is what TYPE replies for a key of kind k: RedisBloom's module
// type names for filters ("MBbloom--", "MBbloomCF"; a table-backed set is
// "MBbloom--" too, as it answers BF.*), "BGexpire-" for an expiring key
// (nine characters, as Redis module type names), "none" for a missing key.
func typeName(k serve.Kind) string {
	switch k {
	case serve.KindBloom, serve.KindSet:
		return "MBbloom--"
	case serve.KindCuckoo:
		return "MBbloomCF"
	case serve.KindExpiring:
		return "BGexpire-"
	}
	return "none"
}
