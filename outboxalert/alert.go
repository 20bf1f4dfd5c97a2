package outboxalert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/errtext"
)

// Alert kinds, the values of Alert.Kind.
const (
	// KindDeadLetter is an alert about one event.
	KindDeadLetter = "outbox.dead_letter"
	// KindDeadLetterSummary sums up several events.
	KindDeadLetterSummary = "outbox.dead_letter_summary"
)

// Alert is the JSON body of one webhook request: one or more dead-lettered
// events.
type Alert struct {
	// Kind is KindDeadLetter for one event, KindDeadLetterSummary for more.
	Kind string `json:"kind"`
	// Text is one line for people; chat webhooks (Slack, Mattermost) show
	// the text field as the message.
	Text string `json:"text"`
	// Schema and Relay say where the events were dead-lettered. For a
	// relay of outbox.Tenants, Schema is the tenant when every event is
	// one tenant's, and Tenants lists (up to 20 of) the tenants otherwise.
	Schema  string   `json:"schema"`
	Tenants []string `json:"tenants,omitempty"`
	Relay   string   `json:"relay,omitempty"`
	// Time is when the alert was sent.
	Time time.Time `json:"time"`
	// Count is how many events were dead-lettered; FirstAt and LastAt when
	// the first and the last of them were.
	Count   int       `json:"count"`
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
	// Events details the first Config.MaxEvents of them.
	Events []Event `json:"events"`
	// EventTypes counts the events per type.
	EventTypes map[string]int `json:"event_types"`
}

// Event is one dead-lettered event in an Alert.
type Event struct {
	ID            int64  `json:"id"`
	Type          string `json:"type"`
	AggregateType string `json:"aggregate_type,omitempty"`
	AggregateID   string `json:"aggregate_id,omitempty"`
	Attempts      int    `json:"attempts"`
	// Tenant and Database say which tenant schema, of which database, the
	// event was dead-lettered in (Event.Tenant, Event.Database); empty for
	// a relay of one schema.
	Tenant   string `json:"tenant,omitempty"`
	Database string `json:"database,omitempty"`
	// LastError is the publish error that dead-lettered the event;
	// Permanent says whether the sink marked it as one retrying cannot fix.
	LastError string    `json:"last_error"`
	Permanent bool      `json:"permanent"`
	At        time.Time `json:"at"`
}

// add records a dead letter in the pending alert; the caller holds a.mu.
func (a *Alerter) add(e outbox.Event, err error) {
	now := a.now()
	p := a.pending
	if p == nil {
		p = &Alert{Schema: a.cfg.Schema, Relay: a.cfg.RelayID, FirstAt: now, EventTypes: map[string]int{}}
		if p.Relay == "" {
			p.Relay = e.LockedBy
		}
		a.pending = p
	}
	p.Count++
	p.LastAt = now
	if e.Tenant != "" {
		name := e.Tenant
		if e.Database != "" {
			name = e.Database + "/" + e.Tenant
		}
		if !slices.Contains(p.Tenants, name) && len(p.Tenants) < maxTenants {
			p.Tenants = append(p.Tenants, name)
		}
	}
	if len(p.Events) < a.cfg.MaxEvents {
		lastErr := e.LastError
		if lastErr == "" && err != nil {
			lastErr = err.Error()
		}
		// An alert carries the error as the database would store it: one
		// from a hook caller other than the relay may hold anything.
		lastErr = errtext.Sanitize(lastErr, errtext.MaxLen)
		p.Events = append(p.Events, Event{ID: e.ID, Type: e.EventType, AggregateType: e.AggregateType,
			AggregateID: e.AggregateID, Attempts: e.Attempts, Tenant: e.Tenant, Database: e.Database, LastError: lastErr, Permanent: outbox.IsPermanent(err), At: now})
	}
	if _, ok := p.EventTypes[e.EventType]; ok || len(p.EventTypes) < maxTypes {
		p.EventTypes[e.EventType]++
	} else {
		p.EventTypes[OtherTypes]++
	}
}

// finish sets the fields that depend on the whole alert.
func (p *Alert) finish(now time.Time) {
	p.Time = now.UTC()
	p.FirstAt, p.LastAt = p.FirstAt.UTC(), p.LastAt.UTC()
	for i := range p.Events {
		p.Events[i].At = p.Events[i].At.UTC()
	}
	where := "schema " + p.Schema
	switch {
	case len(p.Tenants) == 1:
		p.Schema = p.Events[0].Tenant
		where = "tenant " + p.Tenants[0]
	case len(p.Tenants) > 1:
		n, names := fmt.Sprint(len(p.Tenants)), p.Tenants[:min(len(p.Tenants), 5)]
		if len(p.Tenants) == maxTenants {
			n += "+" // more were not recorded
		}
		list := strings.Join(names, ", ")
		if len(p.Tenants) > len(names) {
			list += ", …"
		}
		where = fmt.Sprintf("%s tenants (%s)", n, list)
	}
	if p.Count == 1 && len(p.Events) == 1 {
		e := p.Events[0]
		p.Kind = KindDeadLetter
		agg := ""
		if e.AggregateType != "" || e.AggregateID != "" {
			agg = fmt.Sprintf(", %s %s", e.AggregateType, e.AggregateID)
		}
		p.Text = fmt.Sprintf("outbox: event %d (%s%s) dead-lettered in %s after %d attempts: %s",
			e.ID, e.Type, agg, where, e.Attempts, clip(e.LastError, 300))
		return
	}
	p.Kind = KindDeadLetterSummary
	types := make([]string, 0, len(p.EventTypes))
	for t := range p.EventTypes {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool {
		if p.EventTypes[types[i]] != p.EventTypes[types[j]] {
			return p.EventTypes[types[i]] > p.EventTypes[types[j]]
		}
		return types[i] < types[j]
	})
	var byType []string
	for i, t := range types {
		if i == 5 {
			byType = append(byType, "…")
			break
		}
		byType = append(byType, fmt.Sprintf("%s: %d", t, p.EventTypes[t]))
	}
	ids := make([]string, 0, min(len(p.Events), 5))
	for _, e := range p.Events[:min(len(p.Events), 5)] {
		ids = append(ids, fmt.Sprint(e.ID))
	}
	if p.Count > len(ids) {
		ids = append(ids, "…")
	}
	p.Text = fmt.Sprintf("outbox: %d events dead-lettered in %s since %s (%s); IDs %s",
		p.Count, where, p.FirstAt.Format(time.RFC3339), strings.Join(byType, ", "), strings.Join(ids, ", "))
	if n := len(p.Events); n > 0 {
		p.Text += "; last error: " + clip(p.Events[n-1].LastError, 300)
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// send posts alert, retrying failures with backoff, until it is delivered,
// the retries run out or the Alerter gives up on Close.
func (a *Alerter) send(alert *Alert) {
	body, err := json.Marshal(alert)
	if err != nil {
		a.log.Error("encoding the alert failed", slog.String("error", err.Error()))
		return
	}
	retries := max(a.cfg.Retries, 0)
	for attempt := 0; ; attempt++ {
		err = a.post(body)
		if err == nil {
			a.log.Debug("alert sent", slog.String("kind", alert.Kind), slog.Int("events", alert.Count))
			return
		}
		var fatal *fatalError
		if attempt >= retries || errors.As(err, &fatal) || a.ctx.Err() != nil {
			a.log.Error("the alert webhook failed; the alert is dropped (the relay logged each dead letter)",
				slog.String("kind", alert.Kind), slog.Int("events", alert.Count), slog.Int("attempts", attempt+1),
				slog.String("error", err.Error()))
			return
		}
		wait := a.cfg.RetryBackoff << min(attempt, 10)
		a.log.Warn("the alert webhook failed; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		select {
		case <-a.ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// fatalError is a response that retrying will not change (a 4xx, a
// redirect).
type fatalError struct {
	status   int
	location string // a redirect's target, scheme and host only
}

func (e *fatalError) Error() string {
	if e.status >= 300 && e.status < 400 {
		return fmt.Sprintf("the webhook answered %d %s to %s: redirects are not followed (they would carry the request's headers elsewhere); set the alert webhook URL to the final URL",
			e.status, http.StatusText(e.status), e.location)
	}
	return fmt.Sprintf("the webhook answered %d %s: check the URL and its credentials", e.status, http.StatusText(e.status))
}

// post makes one request. Its errors never hold the URL.
func (a *Alerter) post(body []byte) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("build request: the URL is invalid")
	}
	for k, vs := range a.cfg.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "outboxalert")
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		// *url.Error quotes the URL, credentials and all: keep its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil && a.ctx.Err() == nil {
			return fmt.Errorf("no answer within %v", a.cfg.Timeout)
		}
		return fmt.Errorf("POST %s: %w", a.target, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return fmt.Errorf("the webhook answered %d %s", s, http.StatusText(s))
	default:
		fe := &fatalError{status: s, location: "an unnamed location"}
		if loc, err := resp.Location(); err == nil {
			// The target may hold credentials too: name its host only.
			fe.location = loc.Scheme + "://" + loc.Host
		}
		return fe
	}
}
