// Package route decides where each event goes on a broker: the topic,
// subject, routing key or stream name. A Router applies, in order, the
// event's own override header, the first rule whose event-type pattern
// matches, and a default template.
//
// Templates are text with placeholders in braces: {event_type},
// {aggregate_type}, {aggregate_id}, {id} and {header.NAME} for an event
// header. A placeholder may name a fallback after a bar, used when the
// value is empty: {aggregate_type|events}. Literal braces are written {{
// and }}.
package route

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox"
)

// Default is the template used when none is configured: the aggregate type
// and the event type, such as order.order_created.
const Default = "{aggregate_type|events}.{event_type}"

// Header is the event header that overrides routing for one event: when it
// is set, its value is the destination.
const Header = "outbox_topic"

// Template renders a destination from an event's fields.
type Template struct {
	text  string
	parts []part
}

type part struct {
	literal  string
	field    string // empty for a literal
	header   string // for field "header"
	fallback string
}

var fields = []string{"event_type", "aggregate_type", "aggregate_id", "id", "header"}

// Parse compiles a template. Errors name the position and what to fix.
func Parse(text string) (*Template, error) {
	t := &Template{text: text}
	var lit strings.Builder
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '{' && i+1 < len(text) && text[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(text) && text[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '}':
			return nil, fmt.Errorf("route template %q: unmatched } at byte %d: write }} for a literal brace", text, i)
		case c == '{':
			end := strings.IndexByte(text[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("route template %q: unclosed { at byte %d", text, i)
			}
			p, err := parsePlaceholder(text[i+1 : i+end])
			if err != nil {
				return nil, fmt.Errorf("route template %q: at byte %d: %w", text, i, err)
			}
			if lit.Len() > 0 {
				t.parts = append(t.parts, part{literal: lit.String()})
				lit.Reset()
			}
			t.parts = append(t.parts, p)
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		t.parts = append(t.parts, part{literal: lit.String()})
	}
	if len(t.parts) == 0 {
		return nil, errors.New("route template is empty: use a topic name or placeholders such as " + Default)
	}
	return t, nil
}

func parsePlaceholder(inner string) (part, error) {
	name, fallback, _ := strings.Cut(inner, "|")
	name = strings.TrimSpace(name)
	p := part{field: name, fallback: fallback}
	if h, ok := strings.CutPrefix(name, "header."); ok {
		if h == "" {
			return part{}, errors.New("{header.} names no header: write {header.NAME}")
		}
		p.field, p.header = "header", h
		return p, nil
	}
	for _, f := range fields {
		if name == f && f != "header" {
			return p, nil
		}
	}
	return part{}, fmt.Errorf("unknown placeholder %q: use one of {event_type}, {aggregate_type}, {aggregate_id}, {id}, {header.NAME}", "{"+name+"}")
}

// MustParse is Parse that panics on error, for templates fixed in code.
func MustParse(text string) *Template {
	t, err := Parse(text)
	if err != nil {
		panic(err)
	}
	return t
}

// String returns the template's text.
func (t *Template) String() string { return t.text }

// Render returns the destination for e.
func (t *Template) Render(e *outbox.Event) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.field == "" {
			b.WriteString(p.literal)
			continue
		}
		var v string
		switch p.field {
		case "event_type":
			v = e.EventType
		case "aggregate_type":
			v = e.AggregateType
		case "aggregate_id":
			v = e.AggregateID
		case "id":
			v = strconv.FormatInt(e.ID, 10)
		case "header":
			v = e.Headers[p.header]
		}
		if v == "" {
			v = p.fallback
		}
		b.WriteString(v)
	}
	return b.String()
}

// Rule routes events whose type matches EventType to Topic.
type Rule struct {
	// EventType is a pattern over event types where * matches any run of
	// characters: "order.*", "*.deleted", "user.created".
	EventType string
	// Topic is a template.
	Topic string
}

// Router picks each event's destination.
type Router struct {
	rules    []compiledRule
	fallback *Template
}

type compiledRule struct {
	pattern string
	topic   *Template
}

// New returns a Router that uses the first matching rule and otherwise
// defaultTemplate (Default when empty).
func New(defaultTemplate string, rules ...Rule) (*Router, error) {
	if defaultTemplate == "" {
		defaultTemplate = Default
	}
	fallback, err := Parse(defaultTemplate)
	if err != nil {
		return nil, err
	}
	r := &Router{fallback: fallback}
	for i, rule := range rules {
		if rule.EventType == "" {
			return nil, fmt.Errorf("route rule %d: empty event type pattern: use * to match every type", i+1)
		}
		t, err := Parse(rule.Topic)
		if err != nil {
			return nil, fmt.Errorf("route rule %d (%s): %w", i+1, rule.EventType, err)
		}
		r.rules = append(r.rules, compiledRule{pattern: rule.EventType, topic: t})
	}
	return r, nil
}

// Route returns e's destination: its Header override, else the first
// matching rule's topic, else the default template's.
func (r *Router) Route(e *outbox.Event) string {
	if v := e.Headers[Header]; v != "" {
		return v
	}
	for _, rule := range r.rules {
		if Match(rule.pattern, e.EventType) {
			return rule.topic.Render(e)
		}
	}
	return r.fallback.Render(e)
}

// Match reports whether s matches pattern, where * matches any run of
// characters (including none and including dots) and every other character
// matches itself.
func Match(pattern, s string) bool {
	// Greedy match with backtracking to the last star: linear for the
	// patterns routing uses.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
