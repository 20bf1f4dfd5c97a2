package sqldriver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/sqldriver"
)

func TestStatements(t *testing.T) {
	t.Parallel()
	script := `-- a comment; with a semicolon
CREATE TABLE a (
    x INT -- trailing; comment
);

CREATE INDEX b ON a (x);
-- only a comment at the end
`
	require.Equal(t, []string{
		"-- a comment; with a semicolon\nCREATE TABLE a (\n    x INT -- trailing; comment\n);",
		"CREATE INDEX b ON a (x);",
	}, sqldriver.Statements(script))
	require.Empty(t, sqldriver.Statements("-- nothing\n\n"))

	// A DELIMITER line, as the mysql client reads it, lets a trigger's
	// body hold semicolons.
	require.Equal(t, []string{
		"CREATE TABLE a (x INT);",
		"CREATE TRIGGER t BEFORE INSERT ON a FOR EACH ROW\nBEGIN\n    SET NEW.x = 1;\n    SET NEW.x = 2;\nEND",
		"DROP TABLE b;",
	}, sqldriver.Statements("CREATE TABLE a (x INT);\nDELIMITER //\nCREATE TRIGGER t BEFORE INSERT ON a FOR EACH ROW\nBEGIN\n    SET NEW.x = 1;\n    SET NEW.x = 2;\nEND//\ndelimiter ;\nDROP TABLE b;\n"))
}

func TestTimeScan(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.UTC)
	for _, src := range []any{
		"2026-05-06 07:08:09.123456",
		[]byte("2026-05-06 07:08:09.123456"),
		"2026-05-06T07:08:09.123456Z",
		"2026-05-06T09:08:09.123456+02:00",
		// A driver that parsed the UTC wall clock into another location.
		time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.FixedZone("X", 3600)),
	} {
		var got sqldriver.Time
		require.NoError(t, got.Scan(src), "%v", src)
		require.True(t, want.Equal(got.Time), "%v: got %v", src, got.Time)
		require.Equal(t, time.UTC, got.Location())
	}
	var null sqldriver.Time
	require.NoError(t, null.Scan(nil))
	require.True(t, null.IsZero())
	require.Error(t, null.Scan("yesterday"))
	require.Error(t, null.Scan(42))
}

func FuzzTimeScan(f *testing.F) {
	f.Add("2026-05-06 07:08:09.123")
	f.Add("2026-05-06T07:08:09Z")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		var got sqldriver.Time
		if err := got.Scan(s); err == nil && got.Location() != time.UTC {
			t.Fatalf("%q scanned into %v", s, got.Location())
		}
	})
}
