package driver

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzDecodeHeaders(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":"b"}`, `{"n":1,"b":true,"x":null,"o":{"k":[1]}}`, `[]`, `"s"`, `{"a":"\u00e9\n"}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := DecodeHeaders(raw)
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if len(raw) > 0 && json.Unmarshal(raw, &obj) != nil {
			t.Fatalf("accepted %q, which is not a JSON object", raw)
		}
		for k, v := range h {
			if string(obj[k]) == "null" {
				t.Fatalf("kept null header %q", k)
			}
			_ = v
		}
	})
}

func TestDecodeHeadersKeepsNonStringValues(t *testing.T) {
	t.Parallel()
	h, err := DecodeHeaders([]byte(`{"s":"x","n":12,"b":false,"o":{"a":1},"z":null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"s": "x", "n": "12", "b": "false", "o": `{"a":1}`}
	if len(h) != len(want) {
		t.Fatalf("got %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Fatalf("header %q = %q, want %q", k, h[k], v)
		}
	}
}

func TestLikePatterns(t *testing.T) {
	t.Parallel()
	got := LikePatterns([]string{"order.*", "a%b_c\\d", "*", "exact"})
	want := []string{"order.%", `a\%b\_c\\d`, "%", "exact"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("LikePatterns[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

// globMatch is the event-type pattern semantics: * matches any run of
// characters, everything else itself.
func globMatch(pattern, s string) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == s
	}
	if !strings.HasPrefix(s, pattern[:star]) {
		return false
	}
	rest := pattern[star+1:]
	for i := star; i <= len(s); i++ {
		if globMatch(rest, s[i:]) {
			return true
		}
	}
	return false
}

// likeMatch is SQL LIKE with backslash as the escape character, over
// runes as PostgreSQL and MySQL match them.
func likeMatch(pattern, s []rune) bool {
	if len(pattern) == 0 {
		return len(s) == 0
	}
	switch pattern[0] {
	case '%':
		for i := 0; i <= len(s); i++ {
			if likeMatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '_':
		return len(s) > 0 && likeMatch(pattern[1:], s[1:])
	case '\\':
		if len(pattern) < 2 {
			return false
		}
		pattern = pattern[1:]
	}
	return len(s) > 0 && s[0] == pattern[0] && likeMatch(pattern[1:], s[1:])
}

// FuzzLikePatterns checks that the LIKE pattern of an event-type pattern
// matches exactly what the pattern means: %, _ and \ in a type match only
// themselves.
func FuzzLikePatterns(f *testing.F) {
	for _, seed := range [][2]string{
		{"order.*", "order.created"}, {"a%b", "axxb"}, {"a_b", "acb"}, {`a\b`, `a\b`}, {"*", ""},
		{"**x", "yx"}, {"é*", "éa"}, {`\*`, `\anything`}, {"100%", "100%"}, {"order.*", "orders"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 64 || strings.Count(pattern, "*") > 4 || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return // the matchers are exponential; types are short text
		}
		like := LikePatterns([]string{pattern})[0]
		if got, want := likeMatch([]rune(like), []rune(s)), globMatch(pattern, s); got != want {
			t.Fatalf("pattern %q as LIKE %q matches %q: %t, want %t", pattern, like, s, got, want)
		}
	})
}
