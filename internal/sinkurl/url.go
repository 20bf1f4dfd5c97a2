package sinkurl

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/route"
)

// Parse parses raw with net/url for a sink whose URL it can parse
// (amqp://, redis://, mqtt://). On failure it returns an error for the
// field URL that gives net/url's reason, which never quotes the password,
// followed by use, the form to write.
func Parse(raw, use string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, URLErrorf("does not parse (%v): %s", err, use)
	}
	return u, nil
}

// CheckPort checks u's port, if any: a number from 1 to 65535. name is u
// redacted.
func CheckPort(name string, u *url.URL) error {
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return URLErrorf("%s has port %q: use 1 to 65535", name, p)
		}
	}
	return nil
}

// Redact names the server of u for errors and logs: scheme, host and port,
// and with path the path (a vhost or database), never the userinfo, query
// or fragment.
func Redact(u *url.URL, path bool) string {
	host := u.Host
	if host == "" {
		host = "?"
	}
	s := u.Scheme + "://" + host
	if path {
		s += u.EscapedPath()
	}
	return s
}

// Endpoint is Redact for a URL string, or "(unparsable URL)".
func Endpoint(raw string, path bool) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return Redact(u, path)
}

// Query parses the query of the URL that name redacts and checks that no
// option of once is given twice. With strict, every option must be one of
// once; otherwise options not in it are left to the client library.
func Query(name, rawQuery string, once []string, strict bool) (url.Values, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, URLErrorf("%s: the query does not parse: use option=value pairs joined by &", name)
	}
	for opt, values := range q {
		known := slices.Contains(once, opt)
		if !known && strict {
			return nil, URLErrorf("%s: unknown option %q: use one of %s", name, opt, strings.Join(once, ", "))
		}
		if known && len(values) > 1 {
			return nil, URLErrorf("%s: option %q is given %d times: give it once", name, opt, len(values))
		}
	}
	return q, nil
}

// Route reads the route option, a route template, or returns nil without
// one.
func Route(q url.Values) (*route.Router, error) {
	tmpl := q.Get("route")
	if tmpl == "" {
		return nil, nil
	}
	r, err := route.New(tmpl)
	if err != nil {
		return nil, URLErrorf("route option: %w", err)
	}
	return r, nil
}

// Without returns u with the options names removed from its query, as a
// string: what is left for the client library.
func Without(u *url.URL, q url.Values, names []string) string {
	for _, name := range names {
		q.Del(name)
	}
	c := *u
	c.RawQuery = q.Encode()
	return c.String()
}

// RejectSinkOptions returns an error when the query of the URL that name
// redacts holds one of the sink options names, which only ConfigFromURL
// takes out of a URL; New gets them as Config fields.
func RejectSinkOptions(name string, q url.Values, names []string) error {
	for opt := range q {
		if slices.Contains(names, opt) {
			return URLErrorf("%s: %q is a sink option: parse the URL with ConfigFromURL, or set the Config field", name, opt)
		}
	}
	return nil
}
