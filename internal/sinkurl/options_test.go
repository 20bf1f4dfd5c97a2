package sinkurl

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testutil/configtest"
)

func options(t *testing.T, query string) *Options {
	t.Helper()
	q, err := url.ParseQuery(query)
	require.NoError(t, err)
	return NewOptions(q)
}

func TestOptions(t *testing.T) {
	t.Parallel()
	o := options(t, "s=x&b=true&flag&d=750ms&n=10&r=app.%7Bevent_type%7D")
	require.True(t, o.Has("s"))
	require.False(t, o.Has("nope"))
	require.Equal(t, "x", o.Get("s"))
	require.True(t, o.Bool("b"))
	require.True(t, o.Bool("flag"), "a name alone means true")
	require.False(t, o.Bool("nope"))
	require.Equal(t, 750*time.Millisecond, o.Duration("d"))
	require.Zero(t, o.Duration("nope"))
	require.Equal(t, 10, o.Int("n"))
	require.Zero(t, o.Int("nope"))
	r, err := o.Route("r")
	require.NoError(t, err)
	e := outbox.Event{EventType: "created"}
	require.Equal(t, "app.created", r.Route(&e))
	r, err = o.Route("nope")
	require.NoError(t, err)
	require.Nil(t, r)
	require.NoError(t, o.Err())
}

func TestOptionsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query, field, text string
		read               func(o *Options)
	}{
		{"b=yes", "URL option b", `is "yes": use true or false`, func(o *Options) { o.Bool("b") }},
		{"d=5", "URL option d", `is "5": use a positive duration such as 500ms or 5s`, func(o *Options) { o.Duration("d") }},
		{"d=-1s", "URL option d", "positive duration", func(o *Options) { o.Duration("d") }},
		{"n=many", "URL option n", `is "many": use a positive whole number`, func(o *Options) { o.Int("n") }},
		{"n=0", "URL option n", "positive whole number", func(o *Options) { o.Int("n") }},
		{"n=x&b=x", "URL option n", "positive whole number", func(o *Options) { o.Int("n"); o.Bool("b") }},
	} {
		t.Run(tc.query, func(t *testing.T) {
			t.Parallel()
			o := options(t, tc.query)
			tc.read(o)
			configtest.RequireError(t, o.Err(), tc.field, tc.text)
		})
	}
	_, err := options(t, "r=%7Bnope%7D").Route("r")
	configtest.RequireError(t, err, "URL option r", "unknown placeholder")
}
