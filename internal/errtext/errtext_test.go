package errtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"clean text is kept", "connection refused", 100, "connection refused"},
		{"empty", "", 10, ""},
		{"NUL", "a\x00b", 100, "a\uFFFDb"},
		{"every NUL", "\x00\x00", 100, "\uFFFD\uFFFD"},
		{"invalid bytes, one mark per run", "a\xff\xfe\xfdb\xc3", 100, "a\uFFFDb\uFFFD"},
		{"a lone continuation byte", "\x80x", 100, "\uFFFDx"},
		{"a surrogate encoded in UTF-8 is invalid", "\xed\xa0\x80", 100, "\uFFFD"},
		{"cut with the mark inside the bound", "abcdefghij", 8, "abcde…"},
		{"exactly the bound is not cut", "abcdefgh", 8, "abcdefgh"},
		{"cut on a rune boundary", "aé€😀z", 8, "aé…"},
		{"cut after a whole rune", "aé€😀z", 9, "aé€…"},
		{"cut after cleaning", "\x00\x00\x00\x00", 8, "\uFFFD…"},
		{"no room for the mark", "abcdef", 2, "ab"},
		{"no room for a whole rune", "€€", 2, ""},
		{"zero bound", "abc", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Sanitize(tc.in, tc.max)
			if got != tc.want {
				t.Fatalf("Sanitize(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestSanitizeLongInputStopsEarly(t *testing.T) {
	in := strings.Repeat("\xff\x00x", 1<<20)
	allocs := testing.AllocsPerRun(3, func() { _ = Sanitize(in, 2000) })
	if allocs > 2 {
		t.Fatalf("%v allocations: the output should be built once, bounded", allocs)
	}
	if got := Sanitize(in, 2000); len(got) > 2000 || !strings.HasSuffix(got, Ellipsis) {
		t.Fatalf("got %d bytes ending %q", len(got), got[len(got)-6:])
	}
}

// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestSanitizeCleanTextDoesNotAllocate(t *testing.T) {
	in := strings.Repeat("HTTP 503: service unavailable ", 20)
	if allocs := testing.AllocsPerRun(10, func() { _ = Sanitize(in, 2000) }); allocs != 0 {
		t.Fatalf("%v allocations for clean text", allocs)
	}
}

func FuzzSanitize(f *testing.F) {
	for _, seed := range []struct {
		s   string
		max int
	}{
		{"", 0}, {"ok", 2000}, {"a\x00b", 2000}, {"\xff\xfe", 2000}, {"aé€😀z", 9}, {"aé€😀z", 3},
		{"€€", 2}, {strings.Repeat("é", 1500), 2000}, {"<html>\x00\x1b[0m\xc3\x28</html>", 16},
		{"panic: runtime error\n\tgoroutine 1 [running]:\n", 20}, {"\xed\xa0\x80\xed\xbf\xbf", 5},
	} {
		f.Add(seed.s, seed.max)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 5000
		if max < 0 {
			max = -max
		}
		got := Sanitize(s, max)
		if !utf8.ValidString(got) {
			t.Fatalf("Sanitize(%q, %d) = %q: not valid UTF-8", s, max, got)
		}
		if strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("Sanitize(%q, %d) = %q: holds a NUL", s, max, got)
		}
		if len(got) > max {
			t.Fatalf("Sanitize(%q, %d) = %d bytes, over the bound", s, max, len(got))
		}
		if clean(s) && len(s) <= max && got != s {
			t.Fatalf("Sanitize(%q, %d) = %q: changed clean text", s, max, got)
		}
		if again := Sanitize(got, max); again != got {
			t.Fatalf("not idempotent: %q, then %q", got, again)
		}
		// What is kept is the start of the cleaned text.
		full := Sanitize(s, len(s)*len(Replacement)+len(Ellipsis))
		kept := strings.TrimSuffix(got, Ellipsis)
		if !strings.HasPrefix(full, kept) {
			t.Fatalf("Sanitize(%q, %d) = %q is not a start of %q", s, max, got, full)
		}
	})
}
