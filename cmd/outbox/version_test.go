package main_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "version")
	requireOK(t, res)
	require.Regexp(t, `^outbox \S+\n`, res.stdout)
	require.Contains(t, res.stdout, "built with go1.")
	require.Contains(t, res.stdout, "schema version 1 (001_create_outbox_events)\n")
}
