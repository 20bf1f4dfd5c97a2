package envelope

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercentEncode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                  "",
		"order.created":     "order.created",
		"a b":               "a%20b",
		`say "hi" 100%`:     "say%20%22hi%22%20100%25",
		"zoë":               "zo%C3%AB",
		"tab\there\x7f\x00": "tab%09here%7F%00",
		"<&>=;,/?:@+$#!'~":  "<&>=;,/?:@+$#!'~",
	} {
		require.Equal(t, want, PercentEncode(in), "PercentEncode(%q)", in)
	}
}

func TestValidHeaderValue(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"": true, "a=b, c=d": true, "tab\tok": true, "zoë": true,
		"new\nline": false, "cr\r": false, "nul\x00": false, "del\x7f": false,
	} {
		require.Equal(t, want, ValidHeaderValue(s), "ValidHeaderValue(%q)", s)
	}
}

func FuzzPercentEncode(f *testing.F) {
	for _, s := range []string{"", "plain", "a b", "zoë 日本", "%41", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := PercentEncode(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c <= ' ' || c == '"' || c >= 0x7f {
				t.Fatalf("PercentEncode(%q) = %q holds %q", s, enc, c)
			}
		}
		require.True(t, ValidHeaderValue(enc))
		dec, err := url.PathUnescape(enc)
		require.NoError(t, err)
		require.Equal(t, s, dec, "decoding gives the value back")
	})
}
