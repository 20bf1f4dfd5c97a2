package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProgressIsQuietOffATerminal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newProgress(&buf, "purged")
	p.update(1000)
	p.done()
	require.Empty(t, buf.String())
}

func TestProgressShowsCountAndRate(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	// As newProgress makes it for a terminal, started two seconds ago.
	p := &progress{w: &buf, verb: "purged", start: time.Now().Add(-2 * time.Second)}
	p.update(1000)
	p.update(2000) // within 100ms of the last redraw: skipped
	require.Regexp(t, `^\r\x1b\[Kpurged 1000 events \(\d+/s\)$`, buf.String())
	p.done()
	require.Regexp(t, `\r\x1b\[K$`, buf.String())
}
