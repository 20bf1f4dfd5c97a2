package main_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

// withPassword returns the test database URL with password set; the local
// server's trust authentication ignores it.
func withPassword(t *testing.T, password string) string {
	t.Helper()
	u, err := url.Parse(testutil.DatabaseURL())
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

func TestDatabaseURLPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const pw = "Hunter2Secret"
	tests := []struct {
		name string
		url  string
		code int
		want []string
	}{
		{"unreachable port", "postgres://bob:" + pw + "@127.0.0.1:1/db?connect_timeout=5", 1,
			[]string{"connect to database: failed to connect to `user=bob database=db`", "connection refused"}},
		{"bad host", "postgres://bob:" + pw + "@nosuchhost.invalid:5432/db?connect_timeout=5", 1,
			[]string{"connect to database: failed to connect to `user=bob database=db`"}},
		{"bad port", "postgres://bob:" + pw + "@127.0.0.1:port/db", 2,
			[]string{"invalid --database-url: cannot parse `postgres://bob:xxxxx@127.0.0.1:port/db`: invalid port"}},
		{"space in host", "postgres://bob:" + pw + "@bad host/db", 2, []string{"invalid --database-url: cannot parse", "xxxxx"}},
		{"at sign in password", "postgres://bob:" + pw + "@x@127.0.0.1:port/db", 2, []string{"invalid --database-url:"}},
		{"password in query", "postgres://bob@127.0.0.1:port/db?password=" + pw, 2, []string{"invalid --database-url:", "password=xxxxx"}},
		{"bad sslmode", "postgres://bob:" + pw + "@127.0.0.1/db?sslmode=sometimes", 2, []string{"invalid --database-url:", "sslmode is invalid"}},
		{"key value", "host=127.0.0.1 password=" + pw + " port=nope", 2, []string{"invalid --database-url:", "password=xxxxx"}},
		{"key value quoted", "host=127.0.0.1 password='" + pw + " x' port=nope", 2, []string{"invalid --database-url:"}},
		{"unknown scheme", "redis://bob:" + pw + "@127.0.0.1/db", 2, []string{"invalid --database-url:", "is not a database URL: use postgres://"}},
		{"not a URL", "nonsense", 2, []string{"invalid --database-url: `nonsense` is not a database URL: use postgres://user@host:5432/db, sqlite:///path/app.db, file:app.db or mysql://"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{
				{"--database-url", tt.url, "--log-level", "debug", "stats"},
				{"--database-url", tt.url, "--log-format", "json", "--log-level", "debug", "relay", "--sink", "stdout:"},
			} {
				res := run(t, nil, args...)
				requireFail(t, res, tt.code, tt.want...)
				require.NotContains(t, res.stderr+res.stdout, pw)
				require.LessOrEqual(t, strings.Count(res.stderr, "connection refused"), 1, "one line per distinct error: %s", res.stderr)
			}
			// The same from the environment.
			res := run(t, []string{"OUTBOX_DATABASE_URL=" + tt.url}, "events", "list")
			requireFail(t, res, tt.code, tt.want...)
			require.NotContains(t, res.stderr+res.stdout, pw)
		})
	}
}

func TestDatabaseURLFromEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 2)
	res := run(t, []string{"OUTBOX_DATABASE_URL=" + testutil.DatabaseURL()}, "--schema", b.schema, "stats", "--json")
	requireOK(t, res)
	require.Contains(t, res.stdout, `"pending": 2`)

	// The flag wins over the environment.
	res = run(t, []string{"OUTBOX_DATABASE_URL=postgres://nobody@127.0.0.1:1/none"},
		"--database-url", testutil.DatabaseURL(), "--schema", b.schema, "stats", "--json")
	requireOK(t, res)
}

func TestPasswordNotLoggedOnSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(t, 1)
	const pw = "CorrectHorseBattery"
	for _, format := range []string{"text", "json"} {
		res := run(t, nil, "--database-url", withPassword(t, pw), "--schema", b.schema,
			"--log-format", format, "--log-level", "debug", "stats")
		require.Equal(t, 0, res.code, res.stderr)
		require.NotContains(t, res.stdout+res.stderr, pw)
		require.True(t, strings.Contains(res.stderr, "connected"), "debug log expected: %s", res.stderr)
	}
}

// TestDatabaseURLOtherDatabasesPasswordNeverPrinted covers the database/sql
// URL kinds of the commands that open them through internal/dburl.
func TestDatabaseURLOtherDatabasesPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const pw = "Hunter2Secret"
	for _, tt := range []struct {
		url  string
		code int
		want string
	}{
		{"mysql://bob:" + pw + "@127.0.0.1:1/db?timeout=5s", 1, "connect to mysql://bob:xxxxx@127.0.0.1:1/db"},
		{"mysql://bob:" + pw + "@127.0.0.1:port/db", 2, "invalid --database-url:"},
		{"sqlite://relative.db", 2, "names a host: use sqlite:///absolute/path.db or sqlite:relative/path.db"},
	} {
		for _, args := range [][]string{{"stats"}, {"events", "list"}, {"migrate"}} {
			res := run(t, nil, append([]string{"--database-url", tt.url}, args...)...)
			requireFail(t, res, tt.code, tt.want)
			require.NotContains(t, res.stderr+res.stdout, pw)
		}
	}
}
