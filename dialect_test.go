package outbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func TestParseDialect(t *testing.T) {
	t.Parallel()
	for _, d := range []outbox.Dialect{outbox.DialectPostgres, outbox.DialectSQLite, outbox.DialectMariaDB, outbox.DialectMySQL} {
		got, err := outbox.ParseDialect(string(d))
		require.NoError(t, err)
		require.Equal(t, d, got)
	}
	_, err := outbox.ParseDialect("oracle")
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Dialect", ce.Field)
}

func TestDialectOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, outbox.DialectSQLite, outbox.DialectOf(outbox.SQLite(&sql.DB{})))
	require.Equal(t, outbox.DialectMySQL, outbox.DialectOf(outbox.MySQL(&sql.DB{})))
	require.Equal(t, outbox.DialectPostgres, outbox.DialectOf(outbox.Postgres(nil)))
}

func TestWriteNeedsPostgresDialect(t *testing.T) {
	t.Parallel()
	msg := outbox.Message{EventType: "e", Payload: 1}
	// The dialect is checked before the transaction is touched.
	w := outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectSQLite})
	_, err := w.Write(context.Background(), nil, msg)
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Dialect", ce.Field)
	require.Contains(t, err.Error(), "use WriteSQL")

	w = outbox.NewWriter(outbox.WriterConfig{Dialect: "oracle"})
	_, err = w.WriteSQL(context.Background(), nil, msg)
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), `unknown dialect "oracle"`)
	_, err = w.Write(context.Background(), nil, msg)
	require.ErrorAs(t, err, &ce)
}
