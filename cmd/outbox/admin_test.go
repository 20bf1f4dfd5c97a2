package main_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testutil"
)

const adminTestToken = "cli-admin-token-0123456789abcdef"

// databaseURLWithPassword returns the test database's URL with a password
// in it (the local server trusts its clients, so any password works) and
// that password, which no output may show.
func databaseURLWithPassword(t *testing.T) (string, string) {
	t.Helper()
	u, err := url.Parse(testutil.DatabaseURL())
	require.NoError(t, err)
	if pw, ok := u.User.Password(); ok {
		return u.String(), pw
	}
	const pw = "Adm1n-db-pa55word-never-shown"
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String(), pw
}

var listeningURL = regexp.MustCompile(`msg="admin dashboard listening" url=(http://\S+/)`)

// startAdmin starts `outbox admin` on schema and returns the process and
// the dashboard's URL, with 127.0.0.1 as its host.
func startAdmin(t *testing.T, dbURL, schema string, env []string, args ...string) (*process, string) {
	t.Helper()
	p := start(t, env, append([]string{"--database-url", dbURL, "--schema", schema, "admin"}, args...)...)
	var base string
	testutil.WaitFor(t, 30*time.Second, "outbox admin to listen", func() bool {
		if p.exited() {
			t.Fatalf("outbox admin exited: %v\n%s", p.err, p.stderr.String())
		}
		m := listeningURL.FindStringSubmatch(p.stderr.String())
		if m == nil {
			return false
		}
		u, err := url.Parse(m[1])
		require.NoError(t, err)
		u.Host = "127.0.0.1:" + u.Port()
		base = u.String()
		return true
	})
	return p, base
}

// adminGet fetches u with optional headers and returns the status and body.
func adminGet(t *testing.T, u string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

func TestAdminUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL()}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"public address without auth", nil, []string{"admin", "--addr", "0.0.0.0:8080"},
			[]string{"refusing to serve the admin API on 0.0.0.0 without authentication: pass --admin-token (or $OUTBOX_ADMIN_TOKEN) or --admin-user and --admin-password, or listen on 127.0.0.1"}},
		{"every interface without auth", nil, []string{"admin", "--addr", ":8080"},
			[]string{"refusing to serve the admin API on every interface without authentication"}},
		{"bad address", nil, []string{"admin", "--addr", "8080"}, []string{`invalid --addr "8080": use host:port, such as 127.0.0.1:8080`}},
		{"user without password", nil, []string{"admin", "--admin-user", "ops"}, []string{"missing --admin-password"}},
		{"password without user", []string{"OUTBOX_ADMIN_PASSWORD=pw-only-secret"}, []string{"admin"}, []string{"missing --admin-user"}},
		{"short token", []string{"OUTBOX_ADMIN_TOKEN=short-tok"}, []string{"admin", "--addr", "127.0.0.1:0"},
			[]string{"invalid --admin-token: must be at least 16 characters without spaces"}},
		{"bad sample interval", nil, []string{"admin", "--addr", "127.0.0.1:0", "--sample-interval", "1ms"},
			[]string{"invalid --sample-interval: is 1ms: use at least 100ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, tt.env, append(db, tt.args...)...)
			requireFail(t, res, 2, tt.want...)
			require.NotContains(t, res.stderr, "short-tok")
			require.NotContains(t, res.stderr, "pw-only-secret")
		})
	}
}

// On an address other than loopback the token is required and enough; no
// answer or log line shows a secret; SIGTERM stops it cleanly.
func TestAdminWithTokenOnPublicAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 3)
	b.setFailed(t, ids[0], "boom")
	dbURL, dbPassword := databaseURLWithPassword(t)
	p, base := startAdmin(t, dbURL, b.schema, []string{"OUTBOX_ADMIN_TOKEN=" + adminTestToken}, "--addr", "0.0.0.0:0")

	code, body := adminGet(t, base+"api/stats")
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = adminGet(t, base+"api/stats", "Authorization", "Bearer "+adminTestToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"failed": 1`)
	code, body = adminGet(t, base+"api/events?status=failed", "Authorization", "Bearer "+adminTestToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"last_error": "boom"`)
	code, page := adminGet(t, base)
	require.Equal(t, http.StatusOK, code)
	for _, s := range []string{body, page, p.stderr.String(), p.stdout.String()} {
		require.NotContains(t, s, dbPassword)
		require.NotContains(t, s, adminTestToken)
	}

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
	require.Contains(t, p.stderr.String(), `msg="admin stopped"`)
	require.NotContains(t, p.stderr.String(), "level=ERROR")
}

func TestAdminBasicAuth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, base := startAdmin(t, testutil.DatabaseURL(), b.schema,
		[]string{"OUTBOX_ADMIN_USER=ops", "OUTBOX_ADMIN_PASSWORD=basic-secret-pw"}, "--addr", "127.0.0.1:0", "--read-only")
	code, _ := adminGet(t, base)
	require.Equal(t, http.StatusUnauthorized, code)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"api/info", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", "basic-secret-pw")
	code, body := adminGet(t, base+"api/info", "Authorization", req.Header.Get("Authorization"))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"read_only": true`)
	require.Contains(t, body, `"principal": "ops"`)
	require.Equal(t, 0, p.stop(t, syscall.SIGINT))
	require.False(t, strings.Contains(p.stderr.String(), "basic-secret-pw"))
}

func TestAdminOnSQLite(t *testing.T) {
	t.Parallel()
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	requireOK(t, run(t, nil, "--database-url", dbURL, "migrate"))
	p, base := startAdmin(t, dbURL, "public", nil, "--addr", "127.0.0.1:0")
	code, body := adminGet(t, base+"api/stats")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"pending": 0`)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM))
}
