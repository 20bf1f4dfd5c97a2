package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// seedMixed writes five events of two types and aggregates: 1-3 pending,
// 4 processed, 5 failed with a long error.
func seedMixed(t *testing.T, b eventsBundle) ([]int64, string) {
	t.Helper()
	ids := b.write(t,
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-1", Payload: map[string]int{"n": 1}},
		outbox.Message{EventType: "order.paid", AggregateType: "order", AggregateID: "A-1", Payload: map[string]int{"n": 2}},
		outbox.Message{EventType: "invoice.sent", AggregateType: "invoice", AggregateID: "I-9", Payload: map[string]int{"n": 3}},
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-2", Payload: map[string]int{"n": 4}},
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "A-3", Payload: map[string]int{"n": 5},
			CorrelationID: "corr-5", Headers: map[string]string{"tenant": "acme"}, IdempotencyKey: "key-5", MaxAttempts: 7},
	)
	longErr := "webhook answered 500: " + strings.Repeat("very long body ", 20)
	b.setProcessed(t, ids[3])
	b.setFailed(t, ids[4], longErr)
	return ids, longErr
}

// tableRows returns the ID column of a table listing.
func tableRows(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Regexp(t, `^ID +STATUS +TYPE +AGGREGATE +ATTEMPTS +CREATED_AT +LAST_ERROR$`, lines[0])
	var ids []string
	for _, l := range lines[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

func TestEventsList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, longErr := seedMixed(t, b)
	id := func(i int) string { return fmt.Sprint(ids[i]) }

	res := outboxCmd(t, b.schema, "events", "list")
	requireOK(t, res)
	require.Equal(t, []string{id(4), id(3), id(2), id(1), id(0)}, tableRows(t, res.stdout))
	require.Regexp(t, `(?m)^`+id(4)+` +failed +order\.created +order/A-3 +5 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ +webhook answered 500: very long body`, res.stdout)
	require.NotContains(t, res.stdout, longErr[:100], "last_error is truncated")
	require.Contains(t, res.stdout, "…")

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"status", []string{"--status", "pending"}, []string{id(2), id(1), id(0)}},
		{"failed", []string{"--status", "failed"}, []string{id(4)}},
		{"type", []string{"--type", "order.created"}, []string{id(4), id(3), id(0)}},
		{"aggregate id", []string{"--aggregate-id", "A-1"}, []string{id(1), id(0)}},
		{"aggregate type", []string{"--aggregate-type", "invoice"}, []string{id(2)}},
		{"combined", []string{"--type", "order.created", "--status", "pending"}, []string{id(0)}},
		{"limit", []string{"--limit", "2"}, []string{id(4), id(3)}},
		{"next page", []string{"--limit", "2", "--before-id", id(3)}, []string{id(2), id(1)}},
		{"none", []string{"--type", "nothing"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := outboxCmd(t, b.schema, append([]string{"events", "list"}, tt.args...)...)
			requireOK(t, res)
			require.Equal(t, tt.want, tableRows(t, res.stdout))
		})
	}

	res = outboxCmd(t, b.schema, "events", "list", "--status", "failed", "--json")
	requireOK(t, res)
	var docs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &docs))
	require.Len(t, docs, 1)
	require.Equal(t, float64(ids[4]), docs[0]["id"])
	require.Equal(t, "failed", docs[0]["status"])
	require.Equal(t, longErr, docs[0]["last_error"], "--json keeps the whole error")
	require.Equal(t, map[string]any{"n": float64(5)}, docs[0]["payload"])

	res = outboxCmd(t, b.schema, "events", "list", "--type", "nothing", "--json")
	requireOK(t, res)
	require.Equal(t, "[]\n", res.stdout)
}

func TestEventsShow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, longErr := seedMixed(t, b)

	res := outboxCmd(t, b.schema, "events", "show", fmt.Sprint(ids[4]))
	requireOK(t, res)
	for _, want := range []string{
		fmt.Sprintf("id:              %d\n", ids[4]),
		"event_type:      order.created\n",
		"aggregate_type:  order\n",
		"aggregate_id:    A-3\n",
		"status:          failed\n",
		"attempts:        5\n",
		"max_attempts:    7\n",
		"idempotency_key: key-5\n",
		"last_error:      " + strings.TrimSpace(longErr) + "\n",
		"headers:\n  {\n    \"correlation_id\": \"corr-5\",\n    \"tenant\": \"acme\"\n  }\n",
		"payload:\n  {\n    \"n\": 5\n  }\n",
	} {
		require.Contains(t, res.stdout, want)
	}

	res = outboxCmd(t, b.schema, "events", "show", fmt.Sprint(ids[3]), "--json")
	requireOK(t, res)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, "processed", doc["status"])
	require.Equal(t, "A-2", doc["aggregate_id"])
	require.NotNil(t, doc["processed_at"])
	require.Nil(t, doc["locked_until"])
	require.Equal(t, map[string]any{}, doc["headers"])
	for _, key := range []string{"id", "event_type", "aggregate_type", "aggregate_id", "status", "attempts", "max_attempts",
		"last_error", "idempotency_key", "headers", "payload", "created_at", "updated_at", "available_at", "locked_by",
		"locked_until", "processed_at"} {
		require.Contains(t, doc, key)
	}

	res = outboxCmd(t, b.schema, "events", "show", "999999")
	requireFail(t, res, 1, "event not found: 999999")
}

func TestEventsRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 4)
	b.setFailed(t, ids[0], "boom")
	b.setFailed(t, ids[1], "boom")
	b.setProcessed(t, ids[2])

	// Every named event retried: exit 0.
	res := outboxCmd(t, b.schema, "events", "retry", fmt.Sprint(ids[0]))
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("event %d: retried (failed -> pending)\n", ids[0]), res.stdout)
	e := b.event(t, ids[0])
	require.Equal(t, outbox.StatusPending, e.Status)
	require.Zero(t, e.Attempts)

	// Some not retried: each is explained and the run fails.
	res = outboxCmd(t, b.schema, "events", "retry", fmt.Sprint(ids[1]), fmt.Sprint(ids[2]), fmt.Sprint(ids[3]), "999999", fmt.Sprint(ids[1]))
	requireFail(t, res, 1, "3 of 4 events not retried")
	require.Equal(t, fmt.Sprintf(`event %d: retried (failed -> pending)
event %d: not retried: its status is processed, not failed
event %d: not retried: its status is pending, not failed
event 999999: not retried: not found
`, ids[1], ids[2], ids[3]), res.stdout)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[1]).Status)
	require.Equal(t, outbox.StatusProcessed, b.event(t, ids[2]).Status)
}

func TestEventsRetryAllFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 5)
	for _, id := range ids[:3] {
		b.setFailed(t, id, "boom")
	}
	b.setProcessed(t, ids[3])

	res := outboxCmd(t, b.schema, "events", "retry", "--status", "failed")
	requireOK(t, res) // no progress line: stderr is not a terminal
	require.Equal(t, "retried 3 failed events\n", res.stdout)
	s := b.stats(t)
	require.Equal(t, int64(4), s.Pending)
	require.Zero(t, s.Failed)
	require.Equal(t, int64(1), s.Processed)

	res = outboxCmd(t, b.schema, "events", "retry", "--status", "failed")
	requireOK(t, res)
	require.Equal(t, "retried 0 failed events\n", res.stdout)
}

func TestEventsRetryWithFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.write(t,
		outbox.Message{EventType: "invoice.created", AggregateType: "invoice", AggregateID: "1", Payload: 1},
		outbox.Message{EventType: "invoice.created", AggregateType: "invoice", AggregateID: "2", Payload: 2},
		outbox.Message{EventType: "order.created", AggregateType: "order", AggregateID: "1", Payload: 3},
	)
	for _, id := range ids {
		b.setFailed(t, id, "boom")
	}

	res := outboxCmd(t, b.schema, "events", "retry", "--status", "failed", "--type", "invoice.created", "--dry-run")
	requireOK(t, res)
	require.Equal(t, "would retry 2 failed events (dry run: nothing changed)\n", res.stdout)
	require.Equal(t, int64(3), b.stats(t).Failed, "a dry run changes nothing")

	res = outboxCmd(t, b.schema, "events", "retry", "--status", "failed", "--type", "invoice.created", "--aggregate-id", "2")
	requireOK(t, res)
	require.Equal(t, "retried 1 failed events\n", res.stdout)
	require.Equal(t, outbox.StatusPending, b.event(t, ids[1]).Status)
	require.Empty(t, b.event(t, ids[1]).LastError, "a retry starts afresh")
	require.Equal(t, outbox.StatusFailed, b.event(t, ids[0]).Status)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "x"}, "missing --status failed: the filters select failed events to retry"},
		{[]string{"1", "--dry-run"}, "--dry-run goes with --status failed"},
		{[]string{"--status", "failed", "--created-after", "now"}, `invalid --created-after "now": use an RFC 3339 time`},
	} {
		requireFail(t, outboxCmd(t, b.schema, append([]string{"events", "retry"}, tc.args...)...), 2, tc.want)
	}
}

func TestEventsDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 3)
	b.setProcessed(t, ids[2])

	res := outboxCmd(t, b.schema, "events", "discard", fmt.Sprint(ids[0]), "--reason", "customer deleted")
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("event %d: discarded (pending or failed -> failed)\n", ids[0]), res.stdout)
	e := b.event(t, ids[0])
	require.Equal(t, outbox.StatusFailed, e.Status)
	require.Regexp(t, `^discarded with outbox events discard by \S+: customer deleted$`, e.LastError)

	res = outboxCmd(t, b.schema, "events", "discard", fmt.Sprint(ids[1]), fmt.Sprint(ids[2]), "--reason", "x")
	requireFail(t, res, 1, "1 of 2 events not discarded")
	require.Contains(t, res.stdout, fmt.Sprintf("event %d: not discarded: its status is processed, not pending or failed", ids[2]))
	require.Equal(t, outbox.StatusFailed, b.event(t, ids[1]).Status)

	requireFail(t, outboxCmd(t, b.schema, "events", "discard", fmt.Sprint(ids[1])), 2, "missing --reason: say why the events are discarded")
	requireFail(t, outboxCmd(t, b.schema, "events", "discard", "--reason", "x"), 2, "pass the IDs of the pending or failed events to discard")

	// A dead-lettered event can be discarded too (so that it stops holding
	// back an ordered aggregate), once.
	dead := b.writeN(t, 1)
	b.exec(t, `UPDATE {table} SET status = 'failed', attempts = 5, last_error = 'HTTP 500' WHERE id = $1`, dead[0])
	requireOK(t, outboxCmd(t, b.schema, "events", "discard", fmt.Sprint(dead[0]), "--reason", "dead head"))
	require.Regexp(t, `: dead head$`, b.event(t, dead[0]).LastError)
	again := outboxCmd(t, b.schema, "events", "discard", fmt.Sprint(dead[0]), "--reason", "again")
	requireFail(t, again, 1, "1 of 1 events not discarded")
	require.Contains(t, again.stdout, fmt.Sprintf("event %d: not discarded: it was discarded already", dead[0]))

	// And back: a retry sends it to pending again.
	requireOK(t, outboxCmd(t, b.schema, "events", "retry", fmt.Sprint(ids[0])))
	require.Equal(t, outbox.StatusPending, b.event(t, ids[0]).Status)
}

// TestCompletionOffersFlagValues: outbox completion is documented, and
// completes the values of the flags that take a fixed set.
func TestCompletionOffersFlagValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"events", "list", "--status", ""}, []string{"pending", "processing", "processed", "failed"}},
		{[]string{"purge", "--status", ""}, []string{"processed", "failed"}},
		{[]string{"relay", "--retention", ""}, []string{"processed", "delete", "archive"}},
		{[]string{"stats", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"--log-format", ""}, []string{"text", "json"}},
	} {
		res := run(t, nil, append([]string{"__complete"}, tc.args...)...)
		require.Equal(t, 0, res.code, res.stderr)
		for _, w := range tc.want {
			require.Contains(t, strings.Split(res.stdout, "\n"), w, "%v", tc.args)
		}
	}
	res := run(t, nil, "completion", "bash")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "bash completion")
	require.Contains(t, run(t, nil, "--help").stdout, "completion")
}

func TestEventsReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(t, 3)
	b.setProcessed(t, ids[0])
	b.setProcessed(t, ids[1])

	res := outboxCmd(t, b.schema, "events", "replay", fmt.Sprint(ids[0]), fmt.Sprint(ids[1]))
	requireOK(t, res)
	require.Equal(t, fmt.Sprintf("event %d: replayed (processed -> pending)\nevent %d: replayed (processed -> pending)\n", ids[0], ids[1]), res.stdout)
	e := b.event(t, ids[0])
	require.Equal(t, outbox.StatusPending, e.Status)
	require.True(t, e.ProcessedAt.IsZero())

	res = outboxCmd(t, b.schema, "events", "replay", fmt.Sprint(ids[2]), "424242")
	requireFail(t, res, 1, "2 of 2 events not replayed")
	require.Equal(t, fmt.Sprintf("event %d: not replayed: its status is pending, not processed\nevent 424242: not replayed: not found\n", ids[2]), res.stdout)
}
