package cli

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// redactMask replaces a secret in output.
const redactMask = "xxxxx"

// redactor removes known secrets (the database password, the webhook
// secret) from everything written to stderr: errors and logs. pgx already
// keeps passwords out of its errors, but only on a best-effort basis for a
// URL it cannot parse; this is the second line of defence.
type redactor struct {
	mu      sync.RWMutex
	secrets []string // longest first, so a secret containing another is masked whole
}

// add registers secrets, with their percent-encoded and -decoded forms.
func (r *redactor) add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		forms := []string{s, url.QueryEscape(s), url.PathEscape(s), (&url.URL{User: url.UserPassword("", s)}).User.String()[1:]}
		if d, err := url.PathUnescape(s); err == nil {
			forms = append(forms, d)
		}
		if d, err := url.QueryUnescape(s); err == nil {
			forms = append(forms, d)
		}
		for _, f := range forms {
			if f != "" && !slices.Contains(r.secrets, f) {
				r.secrets = append(r.secrets, f)
			}
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
}

// addDatabaseURL registers every string in a connection URL or key/value
// string that could be a password, however malformed the string is.
func (r *redactor) addDatabaseURL(raw string) { r.add(passwordCandidates(raw)...) }

// String returns s with every registered secret masked.
func (r *redactor) String(s string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redactMask)
	}
	return s
}

// kvPassword finds password values in a key/value connection string.
var kvPassword = regexp.MustCompile(`(?i)((?:^|\s)(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)

// splitURL splits a URL-like database string into its prefix (such as
// "postgres://"), the rest, and the userinfo password's bounds in rest; ok is
// false for a key/value string. Any scheme counts, and so does a string
// without one that has userinfo ("bob:pw@host"): pgx reads those as
// key/value and may echo them whole. The password runs from the first ':'
// of the userinfo to the last '@', which is how net/url reads a password
// holding an unescaped '@'.
func splitURL(raw string) (prefix, rest string, pwStart, pwEnd int, ok bool) {
	pwStart, pwEnd = -1, -1
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest, ok = raw[:i+3], raw[i+3:], true
	} else if at := strings.LastIndexByte(raw, '@'); at >= 0 && !strings.ContainsAny(raw[:at], "= ") {
		rest, ok = raw, true
	}
	if !ok {
		return prefix, rest, pwStart, pwEnd, false
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			pwStart, pwEnd = colon+1, at
		}
	}
	return prefix, rest, pwStart, pwEnd, true
}

// maskQueryPasswords calls mask for each query parameter of rest whose decoded
// name holds "password" (password, sslpassword, however percent-encoded).
func maskQueryPasswords(rest string, mask func(value string) string) string {
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		return rest
	}
	params := strings.Split(rest[q+1:], "&")
	for i, p := range params {
		k, v, found := strings.Cut(p, "=")
		if !found {
			continue
		}
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if strings.Contains(strings.ToLower(name), "password") {
			params[i] = k + "=" + mask(v)
		}
	}
	return rest[:q+1] + strings.Join(params, "&")
}

// passwordCandidates returns the substrings of a database URL or key/value
// string that may be a password. A malformed URL makes the boundaries
// ambiguous, so it returns every plausible reading: masking too much is
// harmless, too little is not.
func passwordCandidates(raw string) []string {
	var out []string
	prefix, rest, start, end, isURL := splitURL(raw)
	if !isURL {
		for _, m := range kvPassword.FindAllStringSubmatch(raw, -1) {
			v := m[2]
			if len(v) >= 2 && strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'") {
				v = strings.ReplaceAll(v[1:len(v)-1], `\'`, `'`)
			}
			out = append(out, v)
		}
		return out
	}
	if start >= 0 {
		pw := rest[start:end]
		out = append(out, pw)
		// A password with an unescaped '@' may be cut at any of them by a
		// reader that takes the first '@': mask each piece too.
		if strings.Contains(pw, "@") {
			out = append(out, strings.Split(pw, "@")...)
		}
	}
	maskQueryPasswords(rest, func(v string) string { out = append(out, v); return v })
	if u, err := url.Parse(prefix + rest); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw)
		}
	}
	return out
}

// redactDatabaseURL returns raw with its passwords masked, for messages
// about a URL that did not parse.
func redactDatabaseURL(raw string) string {
	prefix, rest, start, end, isURL := splitURL(raw)
	if !isURL {
		return kvPassword.ReplaceAllString(raw, "${1}"+redactMask)
	}
	if start >= 0 {
		rest = rest[:start] + redactMask + rest[end:]
	}
	return prefix + maskQueryPasswords(rest, func(string) string { return redactMask })
}
