package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/driver/pgdriver"
	"github.com/outboxkit/outbox/internal/testutil"
)

// outbox admin --tenant-schemas serves every tenant: GET /api/tenants
// sorted by lag, ?tenant= routing the other endpoints; the dashboard's
// per-tenant table and selector switch the views to a tenant's schema.
func TestAdminTenantsInBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	prefix := tenantPrefix(t)
	pool := testutil.Pool(t)
	ctx := context.Background()
	acme, globex := prefix+"acme", prefix+"globex"
	for s, typ := range map[string]string{acme: "acme.thing", globex: "globex.thing"} {
		_, err := pgdriver.Migrate(ctx, pool, s)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+testutil.Table(s)+` (event_type, payload) VALUES ($1, '{}'), ($1, '{}')`, typ)
		require.NoError(t, err)
	}
	// globex lags: its oldest pending event is an hour old.
	_, err := pool.Exec(ctx, `UPDATE `+testutil.Table(globex)+` SET created_at = now() - interval '1 hour', available_at = now() - interval '1 hour' WHERE id = 1`)
	require.NoError(t, err)

	dbURL, _ := databaseURLWithPassword(t)
	p := start(t, nil, "--database-url", dbURL, "admin", "--addr", "127.0.0.1:0", "--sample-interval", "500ms", "--tenant-schemas", prefix+"*")
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
		base = "http://127.0.0.1:" + u.Port() + "/"
		return true
	})

	code, body := adminGet(t, base+"api/tenants")
	require.Equal(t, http.StatusOK, code, body)
	var ts struct {
		Tenants []struct {
			Schema  string `json:"schema"`
			Pending int64  `json:"pending"`
		} `json:"tenants"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ts))
	require.Len(t, ts.Tenants, 2)
	require.Equal(t, globex, ts.Tenants[0].Schema)
	require.Equal(t, acme, ts.Tenants[1].Schema)
	code, body = adminGet(t, base+"api/events?tenant="+url.QueryEscape(acme))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"acme.thing"`)
	require.NotContains(t, body, `"globex.thing"`)
	code, body = adminGet(t, base+"api/stats")
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "missing tenant")

	br.do("open the overview", chromedp.Navigate(base))
	br.waitJS("the tenants table, most lagging first", fmt.Sprintf(`[...document.querySelectorAll('#overview-tenants tr[data-tenant]')].map(r => r.dataset.tenant).join() === %q`, globex+","+acme))
	br.waitJS("the most lagging tenant selected", fmt.Sprintf(`document.querySelector('#tenant')?.value === %q && document.querySelector('h1').textContent.includes(%q)`, globex, globex))
	br.screenshot("overview-tenants")

	br.click(fmt.Sprintf(`#overview-tenants tr[data-tenant=%q] a`, acme))
	br.waitJS("acme selected", fmt.Sprintf(`document.querySelector('#tenant').value === %q && document.querySelector('h1').textContent.includes(%q)`, acme, acme))
	br.do("open the events", chromedp.Navigate(base+"#/events"))
	br.waitJS("acme's events", `document.querySelectorAll('#main tr[data-id]').length === 2 && document.querySelector('#main').textContent.includes('acme.thing')`)
	require.NotContains(t, br.text("#main"), "globex.thing")

	br.waitJS("select globex", fmt.Sprintf(`(() => { const s = document.querySelector('#tenant'); s.value = %q; s.dispatchEvent(new Event('change')); return true })()`, globex))
	br.waitJS("globex's events", `document.querySelector('#main').textContent.includes('globex.thing') && !document.querySelector('#main').textContent.includes('acme.thing')`)
	br.screenshot("events-tenant")
}

func TestAdminTenantsUsageErrors(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", testutil.DatabaseURL(), "admin", "--addr", "127.0.0.1:0", "--tenant-schemas", "s_*"}
	requireFail(t, run(t, nil, append(db, "--schema", "x")...), 2, "each tenant's schema is its own")
	requireFail(t, run(t, nil, append(db, "--tenant-query", "SELECT 1")...), 2, "discover tenants one way")
	requireFail(t, run(t, nil, "--database-url", "sqlite://"+filepath.Join(t.TempDir(), "app.db"), "admin", "--addr", "127.0.0.1:0", "--tenant-schemas", "s_*"),
		2, "--tenant-schemas does not apply to SQLite")
}
