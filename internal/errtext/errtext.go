// Package errtext makes error text safe to store in a database column. An
// error from a sink can carry anything: an HTTP response body in a foreign
// encoding, a panic message with a NUL byte, megabytes of HTML. PostgreSQL
// refuses NUL bytes and invalid UTF-8 in text, MySQL/MariaDB in strict mode
// refuses invalid UTF-8, and a mark the database refuses can never succeed,
// so every piece of error text the outbox stores (last_error) goes through
// Sanitize first.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// MaxLen is the bound, in bytes, on the error text the outbox stores: a
// sink that returns a whole HTTP body cannot bloat the table.
const MaxLen = 2000

// Replacement stands in for each run of bytes that are not valid UTF-8 and
// for each NUL byte.
const Replacement = "\uFFFD"

// Ellipsis marks a cut. It counts toward the bound.
const Ellipsis = "…"

// Sanitize returns s as valid UTF-8 without NUL bytes, at most max bytes
// long: every run of invalid bytes and every NUL becomes Replacement, and
// text longer than max is cut on a rune boundary and ends with Ellipsis.
// Text that is already valid, NUL-free and short enough comes back as it
// is, without an allocation. A max below len(Ellipsis) cuts without the
// mark.
func Sanitize(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) <= max && clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), max) + len(Ellipsis))
	invalid := false // the last thing written was a Replacement for invalid bytes
	for i := 0; i < len(s) && b.Len() <= max; {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			if !invalid {
				b.WriteString(Replacement)
			}
			invalid = true
		case r == 0:
			b.WriteString(Replacement)
			invalid = false
		default:
			b.WriteString(s[i : i+size])
			invalid = false
		}
		i += size
	}
	// The loop stops early only once the output is past max, so output
	// within max is the whole of s, cleaned.
	return cut(b.String(), max)
}

// cut shortens clean text to at most max bytes on a rune boundary, with
// Ellipsis at the end when there is room for it.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	mark := Ellipsis
	if max < len(mark) {
		mark = ""
	}
	n := max - len(mark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// clean reports whether s is valid UTF-8 without NUL bytes.
func clean(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
