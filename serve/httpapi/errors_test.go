package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// TestServeErrorCodes: keyspace error codes become the API's stable codes
// and statuses (docs/serve.md's table), two codes of the core sharing one
// code of the API where the API never told them apart.
func TestServeErrorCodes(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
		code   string
	}{
		{serve.ErrFull, 507, "full"},
		{serve.ErrGrowthLimit, 507, "full"},
		{fmt.Errorf("%w: disk full", serve.ErrLogWrite), 507, "log_write"},
		{serve.ErrOOM, 507, "oom"},
		{serve.ErrNotFound, 404, "not_found"},
		{serve.ErrNotSet, 404, "not_set"},
		{serve.ErrWrongType, 409, "wrong_type"},
		{serve.ErrBadCuckooCapacity, 400, "bad_argument"},
		{serve.ErrBadPosition, 400, "bad_position"},
		{serve.ErrSetReadOnly, 403, "read_only"},
		{serve.ErrClosed, 503, "closed"},
		{serve.ErrBadOffset, 500, "bad_data"},
		{&serve.Error{Code: serve.CodeClock, Msg: "x"}, 500, "clock"},
		{fmt.Errorf("plain"), 500, "internal"},
	} {
		rec := httptest.NewRecorder()
		writeServeError(rec, tt.err)
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		msg := tt.err.Error()
		if se := (*serve.Error)(nil); errors.As(tt.err, &se) {
			msg = se.Msg
		}
		if rec.Code != tt.status || body.Error.Code != tt.code || body.Error.Message != msg {
			t.Errorf("%v: %d %+v; want %d %q with message %q", tt.err, rec.Code, body.Error, tt.status, tt.code, msg)
		}
	}
}
