package envelope

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeString writes what json.Marshal writes, on its fast path for plain
// ASCII and off it.
func FuzzWriteString(f *testing.F) {
	for _, s := range []string{"", "order.created", "urn:shop", "2026-12-05T02:30:00Z", "a\"b", `back\slash`, "<tag>", "a&b",
		"tab\there", "\x7f", "ünïcode", "\xff\xfe", "\u2028", "line\nbreak"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		writeString(&b, s)
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), b.String())
	})
}

func TestPlainJSON(t *testing.T) {
	t.Parallel()
	require.True(t, plainJSON("order.created 1-2_3:4/5"))
	for _, s := range []string{"a\"", `a\`, "<", ">", "&", "\n", "\x7f", "é"} {
		require.False(t, plainJSON(s), "%q", s)
	}
}
