package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// safeText makes stored text (event types, aggregate IDs, errors, header
// values: anything a writer or a sink chose) safe to print in a terminal
// table: control characters, which could move the cursor, retitle the
// window, clear the screen or split a row (C0 including tab and newline,
// DEL, C1 such as the one-byte CSI U+009B), Unicode bidirectional
// overrides, which could reorder what is shown, and bytes that are not
// UTF-8 are written as Go-style escapes (\n, \x1b, \u009b, \xff). Other
// text, including a backslash, is left as it is. JSON output needs none of
// this: encoding/json escapes control characters itself.
func safeText(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safeBlock is safeText for multi-line output (an indented payload): it
// keeps newlines and escapes the rest.
func safeBlock(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = safeText(l)
	}
	return strings.Join(lines, "\n")
}

// needsEscape reports whether safeText would change s.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		} else if c >= utf8.RuneSelf {
			// Rare in event types and IDs: check the runes.
			for _, r := range s[i:] {
				if r < 0x20 || r == 0x7f || r == utf8.RuneError || unsafeRune(r) {
					return true
				}
			}
			return false
		}
	}
	return false
}

// unsafeRune reports a rune other than ASCII that a terminal may act on:
// C1 controls and the bidirectional formatting characters.
func unsafeRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 ||
		r == 0x200e || r == 0x200f || r == 0x061c
}
