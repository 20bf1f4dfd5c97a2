package pgdriver

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArena(t *testing.T) {
	t.Parallel()
	var a arena
	require.Nil(t, a.bytes(nil))
	require.Empty(t, a.string(nil))

	// Enough values to fill several buffers, and large ones that get
	// buffers of their own.
	var (
		strs   []string
		slices [][]byte
		want   []string
	)
	for i := range 2000 {
		v := strings.Repeat(string(rune('a'+i%26)), 1+i%300)
		switch i {
		case 1000:
			v = strings.Repeat("z", arenaMaxChunk+1)
		case 1500:
			v = strings.Repeat("y", arenaOwnChunk)
		}
		src := []byte(v)
		strs = append(strs, a.string(src))
		slices = append(slices, a.bytes(src))
		clear(src) // the arena holds copies
		want = append(want, v)
	}
	// A large value leaves the shared buffer as it was.
	before := len(a.buf)
	big := a.bytes(make([]byte, arenaOwnChunk))
	require.Len(t, big, arenaOwnChunk)
	require.Equal(t, before, len(a.buf))
	for i, b := range slices {
		require.Equal(t, len(b), cap(b), "value %d", i)
		// Appending to a payload reallocates; writing into one changes
		// only it.
		_ = append(b, '!')
		b[0] = '#'
	}
	for i := range want {
		require.Equal(t, want[i], strs[i], "value %d", i)
		require.True(t, bytes.Equal([]byte(want[i][1:]), slices[i][1:]), "value %d", i)
	}
}
