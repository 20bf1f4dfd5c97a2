package main_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "version")
	requireOK(t, res)
	require.Regexp(t, `^outbox \S+\n`, res.stdout)
	require.Contains(t, res.stdout, "built with go1.")
	ms := pgdriver.Migrations()
	latest := ms[len(ms)-1]
	require.Contains(t, res.stdout, fmt.Sprintf("schema version %d (%03d_%s)\n", latest.Version, latest.Version, latest.Name))
}

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	want := run(t, nil, "version")
	requireOK(t, want)
	res := run(t, nil, "--version")
	requireOK(t, res)
	require.Equal(t, want.stdout, res.stdout)
	// A global flag before it changes nothing; after a command it is that
	// command's unknown flag, a usage error.
	res = run(t, nil, "--log-level", "debug", "--version")
	requireOK(t, res)
	require.Equal(t, want.stdout, res.stdout)
	requireFail(t, run(t, nil, "relay", "--version"), 2, "unknown flag: --version")
}
