package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/internal/testutil/pgcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func query(ctx context.Context, url, sql string) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var s string
	err = conn.QueryRow(ctx, sql).Scan(&s)
	return s, err
}

func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{Database: "app", Settings: map[string]string{"application_name": "'probe'"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	got, err := query(ctx, c.URL(), `SELECT current_database() || ' ' || current_setting('application_name') || ' ' || current_setting('fsync')`)
	require.NoError(t, err)
	require.Equal(t, "app probe off", got, "the database, an extra setting and the base settings apply")
	c.Exec(t, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the crash')`)

	c.Restart(t)
	got, err = query(ctx, c.URL(), `SELECT v FROM kept`)
	require.NoError(t, err)
	require.Equal(t, "before the crash", got, "a committed row survives an immediate restart")

	c.Crash(t)
	_, err = query(ctx, c.URL(), `SELECT 'up'`)
	require.Error(t, err, "a crashed cluster refuses connections")
	c.Start(t)
	got, err = query(ctx, c.URL(), `SELECT v FROM kept`)
	require.NoError(t, err)
	require.Equal(t, "before the crash", got)

	c.Stop(t)
	_, err = query(ctx, c.URL(), `SELECT 'up'`)
	require.Error(t, err)
	c.Start(t)
}
