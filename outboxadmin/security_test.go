package outboxadmin_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxadmin"
)

const (
	testToken    = "tok-0123456789abcdef-secret"
	testPassword = "basic-pw-s3cret"
)

func TestBearerToken(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) { c.AuthToken = testToken })
	ids := b.seed(t)

	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong-token-0123456789"}, {"Authorization", "bearer " + testToken}} {
		res := b.get(t, "/api/stats", hdr...)
		require.Equal(t, http.StatusUnauthorized, res.code, "%v", hdr)
		require.Equal(t, `Bearer realm="outbox admin"`, res.header.Get("WWW-Authenticate"))
		require.Contains(t, res.errorText(t), "authentication required")
	}
	res := b.post(t, "/api/events/retry", map[string]any{"ids": []int64{ids[4]}})
	require.Equal(t, http.StatusUnauthorized, res.code)
	require.Equal(t, outbox.StatusFailed, b.event(t, ids[4]).Status)
	require.Contains(t, b.logs.String(), `msg="unauthenticated request refused"`)

	auth := []string{"Authorization", "Bearer " + testToken}
	require.Equal(t, http.StatusOK, b.get(t, "/api/stats", auth...).code)
	res = b.post(t, "/api/events/retry", map[string]any{"ids": []int64{ids[4]}}, auth...)
	require.Equal(t, http.StatusOK, res.code, res.body)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[4]).Status)
	require.Contains(t, b.logs.String(), "action=retry principal=token")

	// The page holds no data; it asks for the token itself.
	require.Equal(t, http.StatusOK, b.get(t, "/").code)
	require.Equal(t, http.StatusOK, b.get(t, "/assets/app.js").code)
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) {
		c.BasicAuth = &outboxadmin.BasicAuth{User: "ops", Password: testPassword}
		c.AuthToken = testToken
	})
	ids := b.seed(t)
	basic := func(user, password string) []string {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.SetBasicAuth(user, password)
		return []string{"Authorization", req.Header.Get("Authorization")}
	}

	for _, p := range []string{"/", "/assets/app.css", "/api/stats"} {
		for _, hdr := range [][]string{nil, basic("ops", "wrong"), basic("root", testPassword)} {
			res := b.get(t, p, hdr...)
			require.Equal(t, http.StatusUnauthorized, res.code, "%s %v", p, hdr)
			require.Equal(t, `Basic realm="outbox admin", charset="UTF-8"`, res.header.Get("WWW-Authenticate"))
		}
		require.Equal(t, http.StatusOK, b.get(t, p, basic("ops", testPassword)...).code, p)
	}
	var info outboxadmin.InfoJSON
	res := b.get(t, "/api/info", basic("ops", testPassword)...)
	res.decode(t, &info)
	require.Equal(t, "ops", info.Principal)

	res = b.post(t, "/api/events/discard", map[string]any{"ids": []int64{ids[6]}, "reason": "bad data"}, basic("ops", testPassword)...)
	require.Equal(t, http.StatusOK, res.code, res.body)
	require.Equal(t, "discarded by ops: bad data", b.event(t, ids[6]).LastError)
	require.Contains(t, b.logs.String(), "action=discard principal=ops")
	// With both configured, the token works for the API too.
	require.Equal(t, http.StatusOK, b.get(t, "/api/stats", "Authorization", "Bearer "+testToken).code)
}

func TestPrincipalFromOwnMiddleware(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) {
		c.Principal = func(r *http.Request) string { return r.Header.Get("X-Forwarded-User") }
	})
	ids := b.seed(t)
	res := b.post(t, "/api/events/retry", map[string]any{"ids": []int64{ids[4]}}, "X-Forwarded-User", "alice@example.com")
	require.Equal(t, http.StatusOK, res.code)
	require.Contains(t, b.logs.String(), "action=retry principal=alice@example.com")
}

func TestCrossOriginActionsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t)
	body := map[string]any{"ids": []int64{ids[4]}}
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "https://evil.example"},
	} {
		res := b.post(t, "/api/events/retry", body, hdr...)
		require.Equal(t, http.StatusForbidden, res.code, "%v", hdr)
		require.Equal(t, "cross-origin request refused: send actions from the dashboard's own origin", res.errorText(t))
		require.Equal(t, outbox.StatusFailed, b.event(t, ids[4]).Status)
	}
	require.Contains(t, b.logs.String(), `msg="cross-origin request refused"`)

	// A form (which a cross-site page can send without a preflight) is not
	// JSON.
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"} {
		res := b.post(t, "/api/events/retry", body, "Content-Type", ct)
		require.Equal(t, http.StatusUnsupportedMediaType, res.code, ct)
		require.Contains(t, res.errorText(t), "Content-Type: application/json")
	}
	require.Equal(t, outbox.StatusFailed, b.event(t, ids[4]).Status)

	// Reads are safe from anywhere; the browser's same-origin POST and a
	// non-browser client (no Origin, no Sec-Fetch-Site) are let through.
	require.Equal(t, http.StatusOK, b.get(t, "/api/stats", "Sec-Fetch-Site", "cross-site").code)
	res := b.post(t, "/api/events/retry", body, "Sec-Fetch-Site", "same-origin", "Origin", b.srv.URL)
	require.Equal(t, http.StatusOK, res.code, res.body)
	res = b.post(t, "/api/events/retry", map[string]any{"ids": []int64{ids[5]}})
	require.Equal(t, http.StatusOK, res.code, res.body)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[5]).Status)
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *outboxadmin.Config) { c.ReadOnly = true })
	ids := b.seed(t)
	for p, body := range map[string]any{
		"/api/events/retry":                         map[string]any{"ids": []int64{ids[4]}},
		"/api/events/replay":                        map[string]any{"ids": []int64{ids[0]}},
		"/api/events/discard":                       map[string]any{"ids": []int64{ids[6]}, "reason": "x"},
		path("/api/events/%d/max-attempts", ids[6]): map[string]any{"max_attempts": 3},
	} {
		res := b.post(t, p, body)
		require.Equal(t, http.StatusForbidden, res.code, p)
		require.Contains(t, res.errorText(t), "the admin API is read-only")
	}
	require.Equal(t, outbox.StatusFailed, b.event(t, ids[4]).Status)
	require.Equal(t, outbox.StatusProcessed, b.event(t, ids[0]).Status)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[6]).Status)
	var info outboxadmin.InfoJSON
	b.getJSON(t, "/api/info", &info)
	require.True(t, info.ReadOnly)
	require.NotContains(t, b.logs.String(), "admin action")
}

// The database URL's password, the token and the basic-auth password never
// appear in an answer or a log line, errors included.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	const dbPassword = "db-Pa55word-never-shown"
	_, schema := testutil.Schema(t)
	cfg, err := pgxpool.ParseConfig(strings.Replace(testutil.DatabaseURL(), "://postgres@", "://postgres:"+dbPassword+"@", 1))
	require.NoError(t, err)
	require.Equal(t, dbPassword, cfg.ConnConfig.Password, "the test URL must take a password")
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for _, schema := range []string{schema, "no_such_schema_for_admin"} {
		logs := &syncBuffer{}
		h, err := outboxadmin.New(outboxadmin.Config{
			Manager:   outbox.NewManager(outbox.Postgres(pool), outbox.ManagerConfig{Schema: schema}),
			Logger:    slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			AuthToken: testToken, BasicAuth: &outboxadmin.BasicAuth{User: "ops", Password: testPassword},
		})
		require.NoError(t, err)
		b := &bundle{ctx: context.Background(), logs: logs}
		b.srv = newServer(t, h)
		auth := []string{"Authorization", "Bearer " + testToken}
		var answers []response
		for _, p := range []string{"/", "/assets/app.js", "/api/info", "/api/stats", "/api/events", "/api/events/1", "/api/relays",
			"/api/events?status=bad", "/api/nothing"} {
			answers = append(answers, b.get(t, p, auth...), b.get(t, p))
		}
		answers = append(answers,
			b.post(t, "/api/events/retry", map[string]any{"ids": []int64{1}}, auth...),
			b.post(t, "/api/events/retry", map[string]any{"filter": map[string]any{}}, auth...),
			b.post(t, "/api/events/discard", map[string]any{"ids": []int64{1}, "reason": "r"}, auth...),
			b.post(t, "/api/events/1/max-attempts", map[string]any{"max_attempts": 2}, auth...),
			b.post(t, "/api/events/retry", map[string]any{"ids": []int64{1}}, "Origin", "https://evil.example"))
		if schema != "no_such_schema_for_admin" {
			require.Equal(t, http.StatusOK, answers[6].code, answers[6].body)
		} else {
			require.Equal(t, http.StatusServiceUnavailable, answers[6].code, answers[6].body)
			require.Equal(t, "the outbox table is missing: run outbox migrate", answers[6].errorText(t))
		}
		for _, a := range answers {
			for _, secret := range []string{dbPassword, testToken, testPassword} {
				require.NotContains(t, a.body, secret)
				for k, v := range a.header {
					require.NotContains(t, k+strings.Join(v, " "), secret)
				}
			}
		}
		for _, secret := range []string{dbPassword, testToken, testPassword} {
			require.NotContains(t, logs.String(), secret)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	mgr := outbox.NewManager(outbox.Postgres(testutil.Pool(t)), outbox.ManagerConfig{})
	tests := []struct {
		cfg   outboxadmin.Config
		field string
		want  string
	}{
		{outboxadmin.Config{}, "Manager", "is nil: make one with outbox.NewManager"},
		{outboxadmin.Config{Manager: mgr, BasePath: "admin"}, "BasePath", `is "admin": use an absolute path`},
		{outboxadmin.Config{Manager: mgr, BasePath: "/{x}"}, "BasePath", "use an absolute path"},
		{outboxadmin.Config{Manager: mgr, SampleInterval: time.Millisecond}, "SampleInterval", "use at least 100ms"},
		{outboxadmin.Config{Manager: mgr, SampleInterval: time.Minute, History: time.Second}, "History", "use at least SampleInterval"},
		{outboxadmin.Config{Manager: mgr, SampleInterval: 100 * time.Millisecond, History: 24 * time.Hour}, "History", "more than 100000 samples"},
		{outboxadmin.Config{Manager: mgr, QueryTimeout: -1}, "QueryTimeout", "use a positive duration"},
		{outboxadmin.Config{Manager: mgr, AuthToken: "short-secret"}, "AuthToken", "at least 16 characters"},
		{outboxadmin.Config{Manager: mgr, BasicAuth: &outboxadmin.BasicAuth{User: "a:b", Password: "p"}}, "BasicAuth.User", "without ':'"},
		{outboxadmin.Config{Manager: mgr, BasicAuth: &outboxadmin.BasicAuth{User: "ops"}}, "BasicAuth.Password", "is empty"},
	}
	for _, tt := range tests {
		_, err := outboxadmin.New(tt.cfg)
		var ce *outbox.ConfigError
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, tt.field, ce.Field)
		require.Contains(t, err.Error(), tt.want)
		require.NotContains(t, err.Error(), "short-secret")
	}
}

// Start samples in the background, without requests, until Stop.
func TestBackgroundSampling(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	h, err := outboxadmin.New(outboxadmin.Config{
		// A schema without the table makes every sample fail and log.
		Manager:        outbox.NewManager(outbox.Postgres(testutil.Pool(t)), outbox.ManagerConfig{Schema: "no_such_schema_for_admin"}),
		Logger:         slog.New(slog.NewTextHandler(logs, nil)),
		SampleInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, h.Stop(ctx), "Stop before Start does nothing")
	require.NoError(t, h.Start(ctx))
	require.EqualError(t, h.Start(ctx), "outboxadmin: already started")
	testutil.WaitFor(t, 10*time.Second, "three failed samples", func() bool {
		return strings.Count(logs.String(), `msg="sample the outbox table"`) >= 3
	})
	require.NoError(t, h.Stop(ctx))
	require.NoError(t, h.Stop(ctx))
	require.Contains(t, logs.String(), "outbox table not found")
}
