package bench_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cmd/outbox/internal/bench"
)

func TestParseScenarios(t *testing.T) {
	t.Parallel()
	all := []bench.Scenario{bench.ScenarioReference, bench.ScenarioReferenceMinimal, bench.ScenarioSink, bench.ScenarioDrain, bench.ScenarioSteady, bench.ScenarioLatency, bench.ScenarioReceive}
	tests := []struct {
		in   []string
		want []bench.Scenario
		err  string
	}{
		{in: nil, want: all},
		{in: []string{"all"}, want: all},
		{in: []string{"latency", "drain", "drain"}, want: []bench.Scenario{bench.ScenarioDrain, bench.ScenarioLatency}},
		{in: []string{"Reference"}, want: []bench.Scenario{bench.ScenarioReference}},
		{in: []string{"tenants", "drain"}, want: []bench.Scenario{bench.ScenarioDrain, bench.ScenarioTenants}},
		{in: []string{"all", "tenants"}, want: append(all, bench.ScenarioTenants)},
		{in: []string{"drain", "sprint"}, err: `unknown scenario "sprint": use reference, reference-minimal, sink, drain, steady, latency, receive, tenants or all`},
	}
	for _, tt := range tests {
		got, err := bench.ParseScenarios(tt.in)
		if tt.err != "" {
			require.EqualError(t, err, tt.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
}

func TestParseModes(t *testing.T) {
	t.Parallel()
	r, err := bench.ParseRetentions("all")
	require.NoError(t, err)
	require.Equal(t, []outbox.Retention{outbox.RetainProcessed, outbox.RetainDelete, outbox.RetainArchive}, r)
	r, err = bench.ParseRetentions("delete")
	require.NoError(t, err)
	require.Equal(t, []outbox.Retention{outbox.RetainDelete}, r)
	_, err = bench.ParseRetentions("forever")
	require.EqualError(t, err, `unknown retention mode "forever": use processed, delete, archive or all`)

	w, err := bench.ParseWakes("all")
	require.NoError(t, err)
	require.Equal(t, []bench.Wake{bench.WakePoll, bench.WakeListen, bench.WakeProcess}, w)
	w, err = bench.ParseWakes("listen")
	require.NoError(t, err)
	require.Equal(t, []bench.Wake{bench.WakeListen}, w)
	_, err = bench.ParseWakes("")
	require.EqualError(t, err, `unknown wake-up mode "": use poll, listen, process or all`)
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := bench.Config{}.WithDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, bench.EventsDefault, c.Events)
	require.Equal(t, bench.BatchSizeDefault, c.BatchSize)
	require.Equal(t, bench.WorkersDefault, c.Workers)
	require.Equal(t, bench.WritersDefault, c.Writers)
	require.Equal(t, bench.PayloadSizeDefault, c.PayloadSize)
	require.Equal(t, bench.DurationDefault, c.Duration)
	require.Equal(t, bench.RateDefault, c.Rate)
	require.Equal(t, bench.PollIntervalDefault, c.PollInterval)
	require.Equal(t, []outbox.Retention{outbox.RetainProcessed}, c.Retentions)
	require.Equal(t, []bench.Wake{bench.WakePoll}, c.Wakes)
	require.Equal(t, bench.Discard{}, c.Sink)
	require.Equal(t, "discard:", c.SinkName)
	require.NotNil(t, c.Logger)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		edit  func(c *bench.Config)
	}{
		{"Events", func(c *bench.Config) { c.Events = -1 }},
		{"BatchSize", func(c *bench.Config) { c.BatchSize = outbox.BatchSizeMax + 1 }},
		{"Workers", func(c *bench.Config) { c.Workers = -1 }},
		{"Writers", func(c *bench.Config) { c.Writers = -1 }},
		{"PayloadSize", func(c *bench.Config) { c.PayloadSize = bench.PayloadSizeMin - 1 }},
		{"Duration", func(c *bench.Config) { c.Duration = -time.Second }},
		{"Rate", func(c *bench.Config) { c.Rate = -1 }},
		{"PollInterval", func(c *bench.Config) { c.PollInterval = -time.Millisecond }},
		{"SchemaPrefix", func(c *bench.Config) { c.SchemaPrefix = "pg_bench_" }},
		{"SchemaPrefix", func(c *bench.Config) { c.SchemaPrefix = "1bench" }},
		{"SchemaPrefix", func(c *bench.Config) { c.SchemaPrefix = `bench"; DROP` }},
		{"Retentions", func(c *bench.Config) { c.Retentions = []outbox.Retention{"forever"} }},
		{"Wakes", func(c *bench.Config) { c.Wakes = []bench.Wake{"shout"} }},
	}
	for _, tt := range tests {
		c := bench.Config{}.WithDefaults()
		tt.edit(&c)
		err := c.Validate()
		var ce *bench.ConfigError
		require.True(t, errors.As(err, &ce), "%s: %v", tt.field, err)
		require.Equal(t, tt.field, ce.Field)
	}
}

func TestPayload(t *testing.T) {
	t.Parallel()
	for _, size := range []int{bench.PayloadSizeMin, 20, 100, 124, 125, 325, 4096} {
		p := bench.Payload(size)
		require.Len(t, p, size)
		require.True(t, json.Valid(p), "%d: %s", size, p)
	}
	require.Len(t, bench.Payload(1), bench.PayloadSizeMin)
}
