package outboxadmin

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// checkParams refuses a request whose path or query holds a NUL byte or
// invalid UTF-8 (after percent-decoding): the database would refuse such a
// value with an error that is no fault of the server's. It reports whether
// the request may go on.
func (h *Handler) checkParams(w http.ResponseWriter, r *http.Request) bool {
	if err := checkRequestText(r); err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

// checkRequestText checks the request's path and query parameters.
func checkRequestText(r *http.Request) error {
	if !storable(r.URL.Path) {
		return badParamf("the path holds a NUL byte or invalid UTF-8: use plain text")
	}
	for name, values := range r.URL.Query() {
		if !storable(name) {
			return badParamf("a query parameter name holds a NUL byte or invalid UTF-8: use plain text")
		}
		for _, v := range values {
			if !storable(v) {
				return badParamf("query parameter %s holds a NUL byte or invalid UTF-8: use plain text", name)
			}
		}
	}
	return nil
}

// checkFilterText checks an action's filter as checkRequestText checks
// query parameters: JSON can carry \u0000.
func checkFilterText(f *FilterJSON) error {
	for _, field := range []struct{ name, value string }{
		{"type", f.EventType}, {"aggregate_type", f.AggregateType},
		{"aggregate_id", f.AggregateID}, {"idempotency_key", f.IdempotencyKey},
	} {
		if !storable(field.value) {
			return badParamf("filter field %s holds a NUL byte or invalid UTF-8: use plain text", field.name)
		}
	}
	return nil
}

// storable reports whether the database can take s as text.
func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }
