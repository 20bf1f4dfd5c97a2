package cli

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestSafeText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"order.created", "order.created"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{`back\slash`, `back\slash`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"row\nsplit\r\tx", `row\nsplit\r\tx`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b2J", `c1 \u009b2J`},
		{"bidi \u202eevil", `bidi \u202eevil`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{"nul\x00", `nul\x00`},
	} {
		if got := safeText(c.in); got != c.want {
			t.Errorf("safeText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := safeBlock("{\n  \"a\": \"\u009b\x7f\"\n}"); got != "{\n  \"a\": \"\\u009b\\x7f\"\n}" {
		t.Errorf("safeBlock kept a control character or lost a newline: %q", got)
	}
}

func FuzzSafeText(f *testing.F) {
	for _, seed := range []string{"", "order.created", "\x1b[31mred", "a\nb", "\u009b", "\u202e", "\xff", "é\x00", `\x1b`, "\t"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := safeText(s)
		if !utf8.ValidString(out) {
			t.Fatalf("safeText(%q) = %q: not valid UTF-8", s, out)
		}
		for _, r := range out {
			if unicode.IsControl(r) || unsafeRune(r) {
				t.Fatalf("safeText(%q) = %q holds %U", s, out, r)
			}
		}
		if !needsEscape(s) && out != s {
			t.Fatalf("safeText changed plain text %q to %q", s, out)
		}
		if strings.Contains(s, "\n") == strings.Contains(safeBlock(s), "\n") == false {
			t.Fatalf("safeBlock(%q) lost or added newlines", s)
		}
		if safeText(out) != out {
			t.Fatalf("safeText is not idempotent on %q: %q, then %q", s, out, safeText(out))
		}
	})
}
