package outboxadmin

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/outbox"
)

// FuzzRequestParams feeds raw query strings and paths to the admin's
// request checks and search parameter parsing: they never panic, bad input
// is a *badParam (a 400 naming the problem), and what passes is storable
// and within bounds.
func FuzzRequestParams(f *testing.F) {
	for _, seed := range [][2]string{
		{"/api/events", "status=failed&type=order.created&limit=50"},
		{"/api/events", "limit=1000&before_id=42&min_attempts=3"},
		{"/api/events", "created_after=2025-01-31T09:00:00Z&created_before=2025-02-01T00:00:00Z"},
		{"/api/events", "type=a%00b"}, {"/api/events", "aggregate_id=%ff"}, {"/api/events/%00", ""},
		{"/api/events", "limit=99999999999999999999"}, {"/api/events", "limit=-1"}, {"/api/events", "status=nope"},
		{"/api/events", "%zz=1"}, {"/api/events", "before_id=9223372036854775807"}, {"/", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, rawPath, rawQuery string) {
		u := &url.URL{Path: rawPath, RawQuery: rawQuery}
		r := &http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}}
		if err := checkRequestText(r); err != nil {
			var bp *badParam
			if !errors.As(err, &bp) {
				t.Fatalf("checkRequestText: %v is not a bad parameter", err)
			}
			return
		}
		q := u.Query()
		p, err := searchParams(q)
		if err != nil {
			var bp *badParam
			if !errors.As(err, &bp) || strings.Contains(err.Error(), "\n") || !utf8.ValidString(err.Error()) {
				t.Fatalf("searchParams(%q): %q is not one clear bad-parameter line", rawQuery, err)
			}
			return
		}
		for _, s := range []string{p.EventType, p.AggregateType, p.AggregateID, p.IdempotencyKey} {
			if !storable(s) {
				t.Fatalf("searchParams(%q) passed unstorable %q", rawQuery, s)
			}
		}
		if p.Limit < 0 || p.Limit > outbox.SearchLimitMax || p.BeforeID < 0 || p.MinAttempts < 0 {
			t.Fatalf("searchParams(%q) = limit %d, before_id %d, min_attempts %d: out of bounds", rawQuery, p.Limit, p.BeforeID, p.MinAttempts)
		}
	})
}

// FuzzHostAllowed checks the Host check: loopback literals pass, names
// other than localhost pass only when allowed, and nothing panics.
func FuzzHostAllowed(f *testing.F) {
	for _, seed := range []string{"localhost", "localhost:8080", "127.0.0.1:1", "[::1]:80", "evil.example", "127.0.0.1.nip.io",
		"[::ffff:127.0.0.1]:8080", "LOCALHOST.", "outbox.internal:9", "", ":80", "[", "a:b:c"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, host string) {
		ok := hostAllowed(host, nil)
		name, _ := splitHost(host)
		if ok && name != "localhost" && !strings.ContainsAny(name, ":0123456789") {
			t.Fatalf("hostAllowed(%q) let a name other than localhost through", host)
		}
		if strings.Contains(name, "example") && ok {
			t.Fatalf("hostAllowed(%q) = true", host)
		}
		if !hostAllowed(host, []string{AnyHost}) {
			t.Fatalf("AnyHost refused %q", host)
		}
	})
}

// FuzzReadAction feeds raw bodies to an action's decoder: it never panics,
// refuses with a bad parameter, and what it accepts names at most maxIDs
// positive IDs, sorted and unique, or a filter of storable text.
func FuzzReadAction(f *testing.F) {
	for _, seed := range []string{
		`{"ids": [3, 1, 3]}`, `{"filter": {}}`, `{"filter": {"type": "order.*", "min_attempts": 2}}`,
		`{"ids": [0]}`, `{"ids": [1], "filter": {}}`, `{"filter": {"type": "\u0000"}}`, `{"reason": "x"}`,
		`{"ids": [-1]}`, `{"ids": [1e30]}`, `{"nope": 1}`, `[]`, ``, `{"filter": {"created_after": "not a time"}}`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, filterOK bool) {
		r := &http.Request{Method: http.MethodPost, Body: io.NopCloser(bytes.NewReader(body)), Header: http.Header{}}
		a, err := readAction(r, filterOK)
		if err != nil {
			var bp *badParam
			if !errors.As(err, &bp) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("readAction(%q): %q is not one bad-parameter line", body, err)
			}
			return
		}
		if len(a.IDs) > maxIDs || (len(a.IDs) == 0) == (a.Filter == nil) || (!filterOK && a.Filter != nil) {
			t.Fatalf("readAction(%q) accepted %d IDs and filter %v", body, len(a.IDs), a.Filter)
		}
		for i, id := range a.IDs {
			if id < 1 || (i > 0 && id <= a.IDs[i-1]) {
				t.Fatalf("readAction(%q) IDs %v are not positive, sorted and unique", body, a.IDs)
			}
		}
		if a.Filter != nil && checkFilterText(a.Filter) != nil {
			t.Fatalf("readAction(%q) accepted an unstorable filter", body)
		}
	})
}
