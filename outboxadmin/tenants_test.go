package outboxadmin_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxadmin"
)

// With Config.Tenants the API lists every tenant's counts sorted by lag,
// and every other endpoint works on the schema ?tenant= names: event IDs
// repeat across tenants, and an action on one leaves the other alone.
func TestTenantsAPI(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		schemas []string
	)
	b := setup(t, func(c *outboxadmin.Config) {
		pg := outbox.Postgres(testutil.Pool(t))
		c.Manager = nil
		c.TenantManager = func(s string) *outbox.Manager { return outbox.NewManager(pg, outbox.ManagerConfig{Schema: s}) }
		c.Tenants = func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), schemas...), nil
		}
	})
	// The second tenant, in a schema of its own, with the same IDs.
	_, other := testutil.Schema(t)
	ob := &bundle{ctx: b.ctx, pool: b.pool, schema: other}
	mu.Lock()
	schemas = []string{b.schema, other}
	mu.Unlock()

	idsA := b.write(t, outbox.Message{EventType: "a.one"}, outbox.Message{EventType: "a.two"})
	idsB := ob.write(t, outbox.Message{EventType: "b.one"}, outbox.Message{EventType: "b.two"})
	require.Equal(t, idsA, idsB)
	b.setFailed(t, idsA[0], "boom")
	ob.setFailed(t, idsB[0], "boom")
	// other lags: its pending event is an hour old.
	ob.exec(t, `UPDATE {table} SET created_at = now() - interval '1 hour', available_at = now() - interval '1 hour' WHERE id = $1`, idsB[1])

	var info outboxadmin.InfoJSON
	b.getJSON(t, "/api/info", &info)
	require.True(t, info.Tenants)

	var ts outboxadmin.TenantsJSON
	b.getJSON(t, "/api/tenants", &ts)
	require.Len(t, ts.Tenants, 2)
	require.Equal(t, other, ts.Tenants[0].Schema, "the most lagging first")
	require.Greater(t, ts.Tenants[0].OldestPendingAgeSeconds, 3000.0)
	require.Equal(t, b.schema, ts.Tenants[1].Schema)
	for _, tc := range ts.Tenants {
		require.Equal(t, int64(1), tc.Pending)
		require.Equal(t, int64(1), tc.Failed)
	}

	q := func(schema string) string { return "tenant=" + url.QueryEscape(schema) }
	var evs outboxadmin.EventsJSON
	b.getJSON(t, "/api/events?"+q(other), &evs)
	require.Len(t, evs.Events, 2)
	require.Equal(t, "b.two", evs.Events[0].EventType)
	b.getJSON(t, "/api/events?status=failed&"+q(b.schema), &evs)
	require.Len(t, evs.Events, 1)
	require.Equal(t, "a.one", evs.Events[0].EventType)

	var st outboxadmin.StatsJSON
	b.getJSON(t, "/api/stats?"+q(other), &st)
	require.Equal(t, int64(1), st.Failed)

	var res outboxadmin.ActionResultJSON
	b.postJSON(t, "/api/events/retry?"+q(other), map[string]any{"ids": []int64{idsB[0]}}, &res)
	require.Equal(t, []int64{idsB[0]}, res.Changed)
	ob.mgr = outbox.NewManager(outbox.Postgres(b.pool), outbox.ManagerConfig{Schema: other})
	require.Equal(t, outbox.StatusPending, ob.event(t, idsB[0]).Status)
	require.Equal(t, outbox.StatusFailed, b.event(t, idsA[0]).Status, "the other tenant's event with the same ID")
	require.Contains(t, b.logs.String(), "tenant="+other)

	r := b.get(t, "/api/stats")
	require.Equal(t, http.StatusBadRequest, r.code)
	require.Contains(t, r.errorText(t), "missing tenant")
	r = b.get(t, "/api/events?tenant=public")
	require.Equal(t, http.StatusNotFound, r.code)
	require.Contains(t, r.errorText(t), `no tenant "public"`)

	// A tenant that discovery starts to list is served; one it drops is not.
	_, third := testutil.Schema(t)
	mu.Lock()
	schemas = []string{b.schema, third}
	mu.Unlock()
	b.getJSON(t, "/api/tenants", &ts)
	require.Len(t, ts.Tenants, 2)
	b.getJSON(t, "/api/stats?"+q(third), &st)
	require.Equal(t, http.StatusNotFound, b.get(t, "/api/stats?"+q(other)).code)

	// A schema named like an injection is served as a quoted identifier.
	evil := testutil.SchemaName(t) + `"; drop table y; --`
	_, err := pgdriver.Migrate(b.ctx, b.pool, evil)
	require.NoError(t, err)
	t.Cleanup(func() { testutil.DropSchema(t, b.pool, evil) })
	eb := &bundle{ctx: b.ctx, pool: b.pool, schema: evil}
	eb.write(t, outbox.Message{EventType: "evil.one"})
	mu.Lock()
	schemas = []string{evil}
	mu.Unlock()
	b.getJSON(t, "/api/tenants", &ts)
	require.Equal(t, evil, ts.Tenants[0].Schema)
	require.Equal(t, int64(1), ts.Tenants[0].Pending)
	b.getJSON(t, "/api/events?"+q(evil), &evs)
	require.Len(t, evs.Events, 1)
	require.Equal(t, "evil.one", evs.Events[0].EventType)
}

// Tenants needs TenantManager.
func TestTenantsConfig(t *testing.T) {
	t.Parallel()
	_, err := outboxadmin.New(outboxadmin.Config{Tenants: func(context.Context) ([]string, error) { return nil, nil }})
	require.ErrorContains(t, err, "TenantManager")
}
