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
