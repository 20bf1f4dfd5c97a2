package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLogDurationsAreStrings(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		logger, err := newLogger(&buf, format, "info", &redactor{})
		require.NoError(t, err)
		logger.Info("relay started", "lease", 30*time.Second, "poll_interval", 1500*time.Millisecond)
		if format == "json" {
			var rec map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
			require.Equal(t, "30s", rec["lease"])
			require.Equal(t, "1.5s", rec["poll_interval"])
			continue
		}
		require.Contains(t, buf.String(), "lease=30s poll_interval=1.5s")
	}
}
