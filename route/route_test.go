package route_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	e := &outbox.Event{ID: 9, EventType: "created", AggregateType: "order", AggregateID: "o-1", Headers: map[string]string{"tenant": "acme"}}
	cases := map[string]string{
		route.Default:                          "order.created",
		"{aggregate_type}.{event_type}":        "order.created",
		"events.{header.tenant}.{id}":          "events.acme.9",
		"{header.missing|none}.{aggregate_id}": "none.o-1",
		"literal":                              "literal",
		"{{x}}-{ event_type }":                 "{x}-created",
	}
	for text, want := range cases {
		tpl, err := route.Parse(text)
		require.NoError(t, err, text)
		require.Equal(t, want, tpl.Render(e), text)
		require.Equal(t, text, tpl.String())
	}
	require.Equal(t, "events.created", route.MustParse(route.Default).Render(&outbox.Event{EventType: "created"}))
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"":              "empty",
		"{nope}":        `unknown placeholder "{nope}"`,
		"{event_type":   "unclosed {",
		"a}b":           "unmatched }",
		"{header.}":     "names no header",
		"x.{aggregate}": `unknown placeholder "{aggregate}"`,
	} {
		_, err := route.Parse(text)
		require.ErrorContains(t, err, want, text)
	}
}

func TestRouter(t *testing.T) {
	t.Parallel()
	r, err := route.New("", route.Rule{EventType: "order.*", Topic: "orders"}, route.Rule{EventType: "*", Topic: "all.{event_type}"})
	require.NoError(t, err)
	require.Equal(t, "orders", r.Route(&outbox.Event{EventType: "order.paid"}))
	require.Equal(t, "all.user.created", r.Route(&outbox.Event{EventType: "user.created"}))
	require.Equal(t, "custom", r.Route(&outbox.Event{EventType: "order.paid", Headers: map[string]string{route.Header: "custom"}}))

	plain, err := route.New("")
	require.NoError(t, err)
	require.Equal(t, "user.created", plain.Route(&outbox.Event{AggregateType: "user", EventType: "created"}))

	_, err = route.New("", route.Rule{EventType: "", Topic: "x"})
	require.ErrorContains(t, err, "rule 1")
	_, err = route.New("", route.Rule{EventType: "a", Topic: "{bad}"})
	require.ErrorContains(t, err, "rule 1 (a)")
}

func TestMatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "a.b", true}, {"order.*", "order.created", true}, {"order.*", "order.", true},
		{"order.*", "orders.created", false}, {"*.deleted", "user.deleted", true}, {"*.deleted", "user.deleted.x", false},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}, {"exact", "exact", true}, {"exact", "exactly", false},
		{"**", "x", true}, {"a*a*a", "aaaa", true},
	}
	for _, c := range cases {
		require.Equal(t, c.want, route.Match(c.pattern, c.s), "%q ~ %q", c.pattern, c.s)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{route.Default, "{{", "}}", "{header.x|y}", "{", "a{id}b", "{event_type|}"} {
		f.Add(s)
	}
	e := &outbox.Event{ID: 1, EventType: "t", Headers: map[string]string{"x": "v"}}
	f.Fuzz(func(t *testing.T, text string) {
		tpl, err := route.Parse(text)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error: %v", err)
			}
			return
		}
		_ = tpl.Render(e)
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("order.*", "order.created")
	f.Add("a*b", "ab")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := route.Match(pattern, s)
		if !strings.Contains(pattern, "*") && got != (pattern == s) {
			t.Fatalf("Match(%q, %q) = %v without a star", pattern, s, got)
		}
		if !route.Match("*"+s, pattern+s) || !route.Match(s+"*", s+pattern) {
			t.Fatalf("a star must absorb any prefix or suffix (%q, %q)", pattern, s)
		}
		if got && !route.Match(pattern+"*", s+"tail") {
			t.Fatalf("Match(%q, %q) but not with a trailing star", pattern, s)
		}
	})
}
