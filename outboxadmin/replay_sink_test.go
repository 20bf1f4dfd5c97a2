package outboxadmin_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestReplayToSink(t *testing.T) {
	t.Parallel()
	rec := outboxtest.NewRecorder()
	b := setup(t, func(c *outboxadmin.Config) { c.ReplaySink, c.ReplaySinkName = rec, "recorder://test" })
	ids := b.write(t,
		outbox.Message{EventType: "order.created", AggregateID: "1", Payload: map[string]int{}},
		outbox.Message{EventType: "order.paid", AggregateID: "1", Payload: map[string]int{}},
		outbox.Message{EventType: "order.created", AggregateID: "2", Payload: map[string]int{}},
		outbox.Message{EventType: "order.created", AggregateID: "3", Payload: map[string]int{}})
	for _, id := range ids[:3] {
		b.setProcessed(t, id)
	}

	var info outboxadmin.InfoJSON
	b.do(t, http.MethodGet, "/api/info", nil).decode(t, &info)
	require.Equal(t, "recorder://test", info.ReplaySink)

	// The confirmation's count: delivered events of the type, not the
	// pending one.
	res := b.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{"type": "order.created"}, "dry_run": true})
	require.Equal(t, http.StatusOK, res.code, res.body)
	var out outboxadmin.ReplayToSinkResultJSON
	res.decode(t, &out)
	require.Equal(t, outboxadmin.ReplayToSinkResultJSON{Sink: "recorder://test", DryRun: true, Count: 2}, out)
	require.Zero(t, rec.Len())

	res = b.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{"type": "order.created"}})
	require.Equal(t, http.StatusOK, res.code, res.body)
	out = outboxadmin.ReplayToSinkResultJSON{}
	res.decode(t, &out)
	require.Equal(t, int64(2), out.Published)
	require.True(t, out.Complete)
	require.Len(t, rec.Events(), 2)
	require.Equal(t, []int64{ids[0], ids[2]}, []int64{rec.Events()[0].ID, rec.Events()[1].ID})
	require.Equal(t, outbox.StatusProcessed, b.event(t, ids[0]).Status, "status untouched")
	require.Contains(t, b.logs.String(), "action=replay_to_sink")
	require.Contains(t, b.logs.String(), "published=2")

	// The request cannot name a sink.
	res = b.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{}, "sink": "http://evil.example"})
	require.Equal(t, http.StatusBadRequest, res.code)
	require.Contains(t, res.errorText(t), `unknown field "sink"`)
	res = b.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{"min_attempts": 2}})
	require.Equal(t, http.StatusBadRequest, res.code)

	// A refusing sink: 502, with where to resume.
	rec.SetFail(func(e outbox.Event) error {
		if e.ID == ids[2] {
			return outbox.Permanent(errors.New("nope"))
		}
		return nil
	})
	res = b.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{}})
	require.Equal(t, http.StatusBadGateway, res.code, res.body)
	out = outboxadmin.ReplayToSinkResultJSON{}
	res.decode(t, &out)
	require.False(t, out.Complete)
	require.Equal(t, ids[1], out.LastID)
	require.Contains(t, out.Error, "resume with after_id")
}

func TestReplayToSinkNeedsAConfiguredSink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{}, "dry_run": true})
	require.Equal(t, http.StatusNotFound, res.code)
	require.Contains(t, res.errorText(t), "no replay sink is configured")

	ro := setup(t, func(c *outboxadmin.Config) {
		c.ReplaySink, c.ReplaySinkName, c.ReadOnly = outboxtest.NewRecorder(), "r", true
	})
	res = ro.do(t, http.MethodPost, "/api/events/replay-to-sink", map[string]any{"filter": map[string]any{}})
	require.Equal(t, http.StatusForbidden, res.code)

	_, err := outboxadmin.New(outboxadmin.Config{Manager: b.mgr, ReplaySink: outboxtest.NewRecorder()})
	var ce *outbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "ReplaySinkName", ce.Field)
}
