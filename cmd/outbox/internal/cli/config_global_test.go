package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseConfigGlobalKeysOnly: a command other than the relay reads the
// database and log keys only; the relay's values are neither read nor
// checked (the secrets they reference need not be set), but unknown keys
// stay errors.
func TestParseConfigGlobalKeysOnly(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig("c.yaml", []byte(fullConfig), env(map[string]string{"DB_PASSWORD": "pw"}), isGlobalFileKey)
	require.NoError(t, err, "WEBHOOK_SECRET and KEY_DIR are not set, and only the relay reads them")
	var flags []string
	for flag := range cfg.values {
		flags = append(flags, flag)
	}
	require.ElementsMatch(t, globalFileFlags, flags)
	require.Equal(t, "postgres://relay:pw@db:5432/app", cfg.values["database-url"].str)

	_, err = parseConfig("c.yaml", []byte("relay:\n  batch_size: 0\n  leese: 1s\n"), env(nil), isGlobalFileKey)
	require.ErrorContains(t, err, `c.yaml:3: relay: unknown key "leese": use one of id, event_types,`)
	_, err = parseConfig("c.yaml", []byte("observability:\n  metrics_addr: nine\n  log_level: loud\n"), env(nil), isGlobalFileKey)
	require.EqualError(t, err, `c.yaml:3: observability.log_level: unknown level "loud": use debug, info, warn, error`)
}
