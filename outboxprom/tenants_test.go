package outboxprom

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	dbtest "github.com/outboxkit/outbox/internal/testutil"
	"github.com/outboxkit/outbox/outboxtest"
)

// tenantSetup makes two tenant schemas under a prefix of the test's own,
// with 3 and 2 events written by plain SQL.
func tenantSetup(t *testing.T) (pool *pgxpool.Pool, prefix, acme, globex string) {
	t.Helper()
	name := dbtest.SchemaName(t)
	prefix = "tp_" + name[len(name)-8:] + "_"
	pool = dbtest.Pool(t)
	acme, globex = prefix+"acme", prefix+"globex"
	for s, n := range map[string]int{acme: 3, globex: 2} {
		t.Cleanup(func() { dbtest.DropSchema(t, pool, s) })
		_, err := pgdriver.Migrate(context.Background(), pool, s)
		require.NoError(t, err)
		_, err = pool.Exec(context.Background(), `INSERT INTO `+dbtest.Table(s)+` (event_type, aggregate_type, aggregate_id, payload)
SELECT 'thing.happened', 'thing', g::text, '{}' FROM generate_series(1, $1) g`, n)
		require.NoError(t, err)
	}
	return pool, prefix, acme, globex
}

// scrape GETs /metrics from a promhttp handler of reg, as Prometheus does,
// and parses the text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	return fams
}

func startTenants(t *testing.T, pool *pgxpool.Pool, prefix string, rec outbox.Sink, obs outbox.TenantObserver) *outbox.Tenants {
	t.Helper()
	ts, err := outbox.NewTenants(outbox.Postgres(pool), outbox.TenantsConfig{
		Relay:   outbox.RelayConfig{Sink: rec, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Schemas: prefix + "*", Refresh: 100 * time.Millisecond, ScanInterval: 20 * time.Millisecond,
		Database: "db.example:5432/app", Observers: []outbox.TenantObserver{obs},
	})
	require.NoError(t, err)
	require.NoError(t, ts.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, ts.Stop(ctx))
	})
	return ts
}

func TestTenantMetricsPerTenant(t *testing.T) {
	t.Parallel()
	pool, prefix, acme, globex := tenantSetup(t)
	reg := prometheus.NewRegistry()
	tm, err := NewTenants(TenantConfig{Registerer: reg, DB: outbox.Postgres(pool), Database: "db.example:5432/app", Sink: "recorder"})
	require.NoError(t, err)
	rec := outboxtest.NewRecorder()
	startTenants(t, pool, prefix, rec, tm)
	tm.SetRelayUp(true)
	rec.WaitLen(t, 5, 10*time.Second)

	label := func(schema string) map[string]string {
		return map[string]string{"schema": schema, "database": "db.example:5432/app", "sink": "recorder"}
	}
	dbtest.WaitFor(t, 10*time.Second, "each tenant's published_total", func() bool {
		fams := scrape(t, reg)
		a, g := series(fams, "outbox_published_total", label(acme)), series(fams, "outbox_published_total", label(globex))
		return a != nil && g != nil && a.GetCounter().GetValue() == 3 && g.GetCounter().GetValue() == 2
	})
	fams := scrape(t, reg)
	require.Len(t, fams["outbox_published_total"].GetMetric(), 2, "one series per tenant")
	for _, s := range []string{acme, globex} {
		up := series(fams, "outbox_relay_up", label(s))
		require.NotNil(t, up)
		require.Equal(t, 1.0, up.GetGauge().GetValue())
		// The table gauges are the tenant's own.
		pending := series(fams, "outbox_events", map[string]string{"schema": s, "database": "db.example:5432/app", "status": "processed"})
		require.NotNil(t, pending, "outbox_events of %s", s)
	}
	// No series leaks credentials or lacks the database label.
	for _, mf := range fams {
		if !strings.HasPrefix(mf.GetName(), "outbox_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == "database" && lp.GetValue() == "db.example:5432/app")
			}
			require.True(t, found, "%s has no database label", mf.GetName())
		}
	}

	// A removed tenant's series go away with its relay.
	dbtest.DropSchema(t, pool, globex)
	dbtest.WaitFor(t, 10*time.Second, "the removed tenant's series unregistered", func() bool {
		return series(scrape(t, reg), "outbox_published_total", label(globex)) == nil
	})
	require.NotNil(t, series(scrape(t, reg), "outbox_published_total", label(acme)))
}

func TestTenantMetricsAggregate(t *testing.T) {
	t.Parallel()
	pool, prefix, _, _ := tenantSetup(t)
	reg := prometheus.NewRegistry()
	tm, err := NewTenants(TenantConfig{Registerer: reg, DB: outbox.Postgres(pool), Database: "db.example:5432/app", Sink: "recorder", Mode: TenantAggregate})
	require.NoError(t, err)
	rec := outboxtest.NewRecorder()
	startTenants(t, pool, prefix, rec, tm)
	rec.WaitLen(t, 5, 10*time.Second)
	label := map[string]string{"schema": AggregateSchema, "database": "db.example:5432/app", "sink": "recorder"}
	dbtest.WaitFor(t, 10*time.Second, "the aggregate published_total", func() bool {
		m := series(scrape(t, reg), "outbox_published_total", label)
		return m != nil && m.GetCounter().GetValue() == 5
	})
	fams := scrape(t, reg)
	require.Len(t, fams["outbox_published_total"].GetMetric(), 1, "one series for every tenant")
	require.Nil(t, fams["outbox_events"], "no per-tenant table gauges in aggregate mode")

	_, err = NewTenants(TenantConfig{Mode: "per-schema"})
	require.ErrorContains(t, err, "use per-tenant or aggregate")
}
