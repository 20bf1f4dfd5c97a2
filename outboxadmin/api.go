package outboxadmin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/errtext"
)

// maxIDs bounds the IDs one action names.
const maxIDs = 10000

func (h *Handler) routes() {
	base := h.cfg.basePath()
	get := func(path string, fn http.HandlerFunc) { h.mux.Handle("GET "+base+path, h.requireAuth(fn)) }
	post := func(path string, fn http.HandlerFunc) { h.mux.Handle("POST "+base+path, h.mutating(fn)) }

	h.mux.Handle("GET "+base+"/{$}", h.page(h.serveIndex))
	h.mux.Handle("GET "+base+"/assets/", h.page(h.serveAsset))
	if base != "" {
		h.mux.Handle("GET "+base, http.RedirectHandler(base+"/", http.StatusMovedPermanently))
	}
	get("/api/info", h.info)
	get("/api/stats", h.stats)
	get("/api/events", h.searchEvents)
	get("/api/events/{id}", h.event)
	get("/api/relays", h.relays)
	get("/api/blocked-aggregates", h.blockedAggregates)
	get("/api/health", h.health)
	get("/api/capture", h.capture)
	get("/api/consumers", h.consumers)
	get("/api/tenants", h.tenantCounts)
	post("/api/events/retry", h.retry)
	post("/api/events/replay", h.replay)
	post("/api/events/replay-to-sink", h.replayToSink)
	post("/api/events/discard", h.discard)
	post("/api/events/{id}/max-attempts", h.setMaxAttempts)
	h.mux.Handle(base+"/api/", h.requireAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no API endpoint %s %s: see docs/admin.md for the API", r.Method, r.URL.Path))
	})))
}

// dbContext bounds a request's database work.
func (h *Handler) dbContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
}

// fail answers err: bad input says what to fix, other errors are logged and
// answered without details, which could hold internals.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		bp *badParam
		ce *outbox.ConfigError
		mb *http.MaxBytesError
	)
	switch {
	case errors.As(err, &bp):
		writeError(w, http.StatusBadRequest, bp.msg)
	case errors.As(err, &ce):
		writeError(w, http.StatusBadRequest, ce.Error())
	case errors.As(err, &mb):
		writeError(w, http.StatusRequestEntityTooLarge, "request body too large: name at most 10000 events per request, or use a filter")
	case errors.Is(err, outbox.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, outbox.ErrNoTable):
		h.log.Error("admin request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		writeError(w, http.StatusServiceUnavailable, "the outbox table is missing: run outbox migrate")
	case errors.Is(err, context.DeadlineExceeded):
		h.log.Warn("admin request timed out", slog.String("path", r.URL.Path), slog.Duration("query_timeout", h.cfg.QueryTimeout))
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("the database did not answer within %v: narrow the search (status, type, time range) or try again", h.cfg.QueryTimeout))
	case r.Context().Err() != nil:
		// The client went away.
	default:
		h.log.Error("admin request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "database error: see the server's log")
	}
}

// InfoJSON describes the handler to the dashboard.
type InfoJSON struct {
	ReadOnly              bool    `json:"read_only"`
	Principal             string  `json:"principal"`
	SampleIntervalSeconds float64 `json:"sample_interval_seconds"`
	HistorySeconds        float64 `json:"history_seconds"`
	// ReplaySink names the sink delivered events may be replayed to
	// (Config.ReplaySink); absent when there is none.
	ReplaySink string `json:"replay_sink,omitempty"`
	// Tenants is true when the handler serves tenant schemas
	// (Config.Tenants): the other endpoints then take ?tenant=SCHEMA.
	Tenants bool `json:"tenants,omitempty"`
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, InfoJSON{
		ReadOnly: h.cfg.ReadOnly, Principal: principalOf(r),
		SampleIntervalSeconds: h.cfg.SampleInterval.Seconds(), HistorySeconds: h.cfg.History.Seconds(),
		ReplaySink: h.cfg.ReplaySinkName, Tenants: h.cfg.Tenants != nil,
	})
}

// StatsJSON is GET /api/stats: the newest counts and the charts' points.
// Its counts are CountsJSON, the document of outbox stats --json too; here
// Processed is the planner's estimate (counting the history exactly would
// scan it on every sample).
type StatsJSON struct {
	At time.Time `json:"at"`
	CountsJSON
	SampleIntervalSeconds float64     `json:"sample_interval_seconds"`
	Series                []PointJSON `json:"series"`
}

// PointJSON is one sample. The rates are over the time since the previous
// sample and absent on the first.
type PointJSON struct {
	T                  int64    `json:"t"` // Unix milliseconds
	Pending            int64    `json:"pending"`
	Processing         int64    `json:"processing"`
	Failed             int64    `json:"failed"`
	Processed          int64    `json:"processed"`
	LagSeconds         float64  `json:"lag_seconds"`
	WrittenPerSecond   *float64 `json:"written_per_second,omitempty"`
	PublishedPerSecond *float64 `json:"published_per_second,omitempty"`
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	since, err := intParam(r.URL.Query(), "since", 0, 1<<62)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.dbContext(r)
	defer cancel()
	samples, err := h.sampler.fresh(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	last := samples[len(samples)-1]
	out := StatsJSON{
		At: last.At.UTC(), CountsJSON: NewCountsJSON(last.Stats),
		SampleIntervalSeconds: h.cfg.SampleInterval.Seconds(),
		Series:                []PointJSON{},
	}
	for _, s := range samples {
		if s.At.UnixMilli() <= since {
			continue
		}
		p := PointJSON{
			T: s.At.UnixMilli(), Pending: s.Stats.Pending, Processing: s.Stats.Processing, Failed: s.Stats.Failed,
			Processed: s.Stats.Processed, LagSeconds: roundMillis(s.Stats.OldestPendingAge.Seconds()),
		}
		if secs := s.flow.Interval.Seconds(); s.hasFlow && secs > 0 {
			written, published := float64(s.flow.Written)/secs, float64(s.flow.Published)/secs
			p.WrittenPerSecond, p.PublishedPerSecond = &written, &published
		}
		out.Series = append(out.Series, p)
	}
	writeJSON(w, http.StatusOK, out)
}

func roundMillis(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// EventsJSON is a page of search results. NextBeforeID, when set, is the
// before_id of the next (older) page.
type EventsJSON struct {
	Events       []EventJSON `json:"events"`
	NextBeforeID *int64      `json:"next_before_id"`
}

func (h *Handler) searchEvents(w http.ResponseWriter, r *http.Request) {
	p, err := searchParams(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if p.Limit == 0 {
		p.Limit = outbox.ListLimitDefault
	}
	ctx, cancel := h.dbContext(r)
	defer cancel()
	events, more, err := h.searchPage(ctx, p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := EventsJSON{Events: make([]EventJSON, len(events))}
	for i := range events {
		out.Events[i] = NewEventJSON(&events[i], false)
	}
	if more {
		next := events[len(events)-1].ID
		out.NextBeforeID = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// searchPage returns a page of p.Limit events and whether an older page
// exists: it asks for one event more than the page, or, when the page is
// already the largest a search returns, for the one event after it.
func (h *Handler) searchPage(ctx context.Context, p outbox.SearchParams) ([]outbox.Event, bool, error) {
	limit := p.Limit
	p.Limit = min(limit+1, outbox.SearchLimitMax)
	events, err := h.cfg.Manager.SearchEvents(ctx, p)
	if err != nil || len(events) < limit {
		return events, false, err
	}
	if len(events) > limit {
		return events[:limit], true, nil
	}
	if limit < outbox.SearchLimitMax {
		return events, false, nil
	}
	p.BeforeID, p.Limit = events[len(events)-1].ID, 1
	next, err := h.cfg.Manager.SearchEvents(ctx, p)
	return events, len(next) > 0, err
}

func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, badParamf("invalid event ID %q: use a positive integer", s)
	}
	return id, nil
}

func (h *Handler) event(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.dbContext(r)
	defer cancel()
	e, err := h.cfg.Manager.Event(ctx, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewEventJSON(&e, true))
}

// RelaysJSON is GET /api/relays, and the relays of outbox stats --json.
type RelaysJSON struct {
	Relays []RelayJSON `json:"relays"`
}

// RelayJSON is one relay (outbox.RelayInfo): its heartbeat row, idle
// relays included, and its leases on processing events. The process
// fields are absent for a relay seen only through its leases (heartbeat
// false); the lease fields are null for a relay holding none.
type RelayJSON struct {
	RelayID    string   `json:"relay_id"`
	Heartbeat  bool     `json:"heartbeat"`
	Host       string   `json:"host,omitempty"`
	PID        int      `json:"pid,omitempty"`
	Version    string   `json:"version,omitempty"`
	Sink       string   `json:"sink,omitempty"`
	EventTypes []string `json:"event_types,omitempty"`
	// Ordering ("none" or "aggregate"), OrderedFailure ("block" or "skip",
	// ordered relays) and Leases ("rows" or "partitions") are how the
	// relay delivers; absent for a relay of an earlier version.
	Ordering       string     `json:"ordering,omitempty"`
	OrderedFailure string     `json:"ordered_failure,omitempty"`
	Leases         string     `json:"leases,omitempty"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	LastSeen       *time.Time `json:"last_seen,omitempty"`
	// LastClaimAt is the last claim that leased events, null for none
	// since the relay started.
	LastClaimAt *time.Time `json:"last_claim_at"`
	// Stale says the relay missed three heartbeats: it was killed, hangs
	// or lost the database.
	Stale         bool       `json:"stale"`
	Events        int64      `json:"events"`
	FirstLeaseEnd *time.Time `json:"first_lease_end"`
	LastLeaseEnd  *time.Time `json:"last_lease_end"`
	// Expired says the relay's oldest lease ended: it likely died, and the
	// lease rescue will return its events to pending.
	Expired bool `json:"expired"`
}

// NewRelaysJSON is the document of relays, as GET /api/relays answers it.
func NewRelaysJSON(relays []outbox.RelayInfo) RelaysJSON {
	out := RelaysJSON{Relays: make([]RelayJSON, len(relays))}
	for i, r := range relays {
		out.Relays[i] = RelayJSON{
			RelayID: r.RelayID, Heartbeat: r.Heartbeat, Host: r.Host, PID: r.PID, Version: r.Version, Sink: r.Sink,
			EventTypes: r.EventTypes, Ordering: string(r.Ordering), OrderedFailure: string(r.OrderedFailure),
			Leases: string(r.Leases), StartedAt: optionalTime(r.StartedAt), LastSeen: optionalTime(r.LastSeen),
			LastClaimAt: optionalTime(r.LastClaim), Stale: r.Stale,
			Events: r.Lease.Events, FirstLeaseEnd: optionalTime(r.Lease.FirstEnd), LastLeaseEnd: optionalTime(r.Lease.LastEnd),
			Expired: r.Lease.Expired,
		}
	}
	return out
}

func (h *Handler) relays(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.dbContext(r)
	defer cancel()
	relays, err := h.cfg.Manager.Relays(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewRelaysJSON(relays))
}

// ConsumersJSON is GET /api/consumers: the consumer side's backlog, each
// consumer with unprocessed messages in its inbox (inbox_messages) or a
// broker report (inbox_consumers), the most lagging first. Available is false when the handler has no inbox to
// read (Config.Consumers is nil), with nothing listed.
type ConsumersJSON struct {
	Available bool              `json:"available"`
	Consumers []ConsumerLagJSON `json:"consumers"`
}

// ConsumerLagJSON is one consumer's backlog: outbox stats --json's
// consumers entries.
//
// The broker_ fields are present when the consumer's receiver (outbox
// receive --from nats|kafka) reported the broker's own pending count in
// inbox_consumers: BrokerPending is the count it last read,
// BrokerReportedAgeSeconds how long ago by the database clock, and
// BrokerPendingStale is true when that is more than
// inbox.BrokerReportStaleIntervals of the receiver's poll intervals ago,
// so the count is no longer current. A consumer with such a report is
// listed even when it has no unprocessed messages.
type ConsumerLagJSON struct {
	Consumer                    string   `json:"consumer"`
	Unprocessed                 int64    `json:"unprocessed"`
	OldestUnprocessedAgeSeconds float64  `json:"oldest_unprocessed_age_seconds"`
	Broker                      string   `json:"broker,omitempty"`
	BrokerPending               *int64   `json:"broker_pending,omitempty"`
	BrokerReportedAgeSeconds    *float64 `json:"broker_reported_age_seconds,omitempty"`
	BrokerPendingStale          *bool    `json:"broker_pending_stale,omitempty"`
}

// NewConsumerLagsJSON returns lags (inbox.Lag) and reports
// (inbox.BrokerReports) as one entry per consumer, in lags' order: a
// report is added to its consumer's backlog, or listed after them with no
// unprocessed messages.
func NewConsumerLagsJSON(lags []inbox.ConsumerLag, reports []inbox.BrokerReport) []ConsumerLagJSON {
	out := make([]ConsumerLagJSON, len(lags), len(lags)+len(reports))
	at := make(map[string]int, len(lags))
	for i, l := range lags {
		out[i] = ConsumerLagJSON{Consumer: l.Consumer, Unprocessed: l.Unprocessed, OldestUnprocessedAgeSeconds: l.OldestUnprocessedAge.Seconds()}
		at[l.Consumer] = i
	}
	for _, r := range reports {
		i, ok := at[r.Consumer]
		if !ok {
			i = len(out)
			out = append(out, ConsumerLagJSON{Consumer: r.Consumer})
		}
		pending, age, stale := r.Pending, r.Age.Seconds(), r.Stale()
		out[i].Broker, out[i].BrokerPending, out[i].BrokerReportedAgeSeconds, out[i].BrokerPendingStale = r.Broker, &pending, &age, &stale
	}
	return out
}

func (h *Handler) consumers(w http.ResponseWriter, r *http.Request) {
	out := ConsumersJSON{Consumers: []ConsumerLagJSON{}}
	if h.cfg.Consumers != nil {
		ctx, cancel := h.dbContext(r)
		defer cancel()
		lags, err := h.cfg.Consumers(ctx)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		out.Available = true
		out.Consumers = append(out.Consumers, lags...)
		slices.SortStableFunc(out.Consumers, func(a, b ConsumerLagJSON) int {
			return cmp.Compare(b.OldestUnprocessedAgeSeconds, a.OldestUnprocessedAgeSeconds)
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// BlockedAggregatesJSON is GET /api/blocked-aggregates: the aggregates
// whose ordered delivery (relay --ordering aggregate) waits behind a failed
// first event, the head, as Manager.BlockedAggregates finds them. Supported
// is false on a database without ordering (MySQL/MariaDB), with nothing
// listed.
type BlockedAggregatesJSON struct {
	Supported bool `json:"supported"`
	// Policy is the failure policy the list is for: block (the default)
	// or skip (only heads still being retried hold their key).
	Policy string `json:"policy"`
	outbox.BlockedAggregates
}

// blockedLimitDefault is how many blocked aggregates the API lists unless
// asked for another number.
const blockedLimitDefault = 50

func (h *Handler) blockedAggregates(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", 1, 1000)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if limit == 0 {
		limit = blockedLimitDefault
	}
	policy := outbox.OrderedFailureBlock
	if p := q.Get("policy"); p != "" {
		if policy, err = outbox.ParseOrderedFailure(p); err != nil {
			h.fail(w, r, badParamf("invalid policy %q: use block or skip", p))
			return
		}
	}
	ctx, cancel := h.dbContext(r)
	defer cancel()
	out := BlockedAggregatesJSON{Supported: true, Policy: string(policy)}
	out.BlockedAggregates, err = h.cfg.Manager.BlockedAggregates(ctx, policy, int(limit))
	switch {
	case errors.Is(err, outbox.ErrOrderingUnsupported):
		out.Supported = false
	case err != nil:
		h.fail(w, r, err)
		return
	}
	if out.Aggregates == nil {
		out.Aggregates = []outbox.BlockedAggregate{}
	}
	writeJSON(w, http.StatusOK, out)
}

// ActionJSON is the body of retry, replay and discard: either IDs or a
// filter (retry and replay only), and for discard a reason.
type ActionJSON struct {
	IDs    []int64     `json:"ids,omitempty"`
	Filter *FilterJSON `json:"filter,omitempty"`
	Reason string      `json:"reason,omitempty"`
}

// ActionResultJSON is what an action changed. For IDs, Changed lists those
// it changed and Unchanged the others (missing, or in another status).
type ActionResultJSON struct {
	Count     int64   `json:"count"`
	Changed   []int64 `json:"changed,omitempty"`
	Unchanged []int64 `json:"unchanged,omitempty"`
}

// readAction decodes and checks an action's body.
func readAction(r *http.Request, filterOK bool) (ActionJSON, error) {
	var a ActionJSON
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return a, err
		}
		return a, badParamf("invalid JSON body: %v", err)
	}
	switch {
	case len(a.IDs) == 0 && a.Filter == nil && filterOK:
		return a, badParamf(`name the events: {"ids": [1, 2]} or {"filter": {…}} ({"filter": {}} for all)`)
	case len(a.IDs) == 0 && !filterOK:
		return a, badParamf(`name the events: {"ids": [1, 2]}`)
	case len(a.IDs) > 0 && a.Filter != nil:
		return a, badParamf("pass ids or filter, not both")
	case !filterOK && a.Filter != nil:
		return a, badParamf("this action takes ids only")
	case len(a.IDs) > maxIDs:
		return a, badParamf("%d IDs: name at most %d per request, or use a filter", len(a.IDs), maxIDs)
	}
	if a.Filter != nil {
		if err := checkFilterText(a.Filter); err != nil {
			return a, err
		}
	}
	for _, id := range a.IDs {
		if id < 1 {
			return a, badParamf("invalid event ID %d: use positive integers", id)
		}
	}
	slices.Sort(a.IDs)
	a.IDs = slices.Compact(a.IDs)
	return a, nil
}

// idResult sorts the IDs an action named into changed and unchanged, in
// time linear in their number (an action names up to maxIDs).
func idResult(ids, changed []int64) ActionResultJSON {
	res := ActionResultJSON{Count: int64(len(changed)), Changed: changed}
	done := make(map[int64]struct{}, len(changed))
	for _, id := range changed {
		done[id] = struct{}{}
	}
	for _, id := range ids {
		if _, ok := done[id]; !ok {
			res.Unchanged = append(res.Unchanged, id)
		}
	}
	if res.Changed == nil {
		res.Changed = []int64{}
	}
	return res
}

// requeue serves retry and replay: by IDs with byID, or by filter with
// byFilter.
func (h *Handler) requeue(w http.ResponseWriter, r *http.Request, action string,
	byID func(context.Context, ...int64) ([]int64, error),
	byFilter func(context.Context, outbox.EventFilter, outbox.Progress) (int64, error),
) {
	a, err := readAction(r, true)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// A bulk action may outlast QueryTimeout: it is bounded per batch by
	// the database instead, and stops if the client goes away.
	ctx := r.Context()
	if a.Filter != nil {
		f := a.Filter.filter()
		n, err := byFilter(ctx, f, nil)
		h.audit(r, action, slog.Any("filter", a.Filter), slog.Int64("count", n), errAttr(err))
		if err != nil {
			h.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, ActionResultJSON{Count: n})
		return
	}
	changed, err := byID(ctx, a.IDs...)
	h.audit(r, action, slog.Any("event_ids", a.IDs), slog.Any("changed", changed), errAttr(err))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, idResult(a.IDs, changed))
}

func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.Any("error", err)
}

func (h *Handler) retry(w http.ResponseWriter, r *http.Request) {
	h.requeue(w, r, "retry", h.cfg.Manager.Retry, h.cfg.Manager.RetryMatching)
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request) {
	h.requeue(w, r, "replay", h.cfg.Manager.Replay, h.cfg.Manager.ReplayMatching)
}

func (h *Handler) discard(w http.ResponseWriter, r *http.Request) {
	a, err := readAction(r, false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	reason := strings.TrimSpace(a.Reason)
	if reason == "" {
		h.fail(w, r, badParamf(`say why the events are discarded: {"ids": […], "reason": "…"}`))
		return
	}
	// The stored reason says who discarded the events; it is cut and
	// cleaned as the relay's errors are (a NUL in the JSON would make the
	// database refuse it).
	stored := errtext.Sanitize("discarded by "+principalOf(r)+": "+reason, outbox.ReasonMaxLen)
	ctx, cancel := h.dbContext(r)
	defer cancel()
	changed, err := h.cfg.Manager.Discard(ctx, stored, a.IDs...)
	h.audit(r, "discard", slog.Any("event_ids", a.IDs), slog.Any("changed", changed), slog.String("reason", reason), errAttr(err))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, idResult(a.IDs, changed))
}

// MaxAttemptsJSON is the body of POST /api/events/{id}/max-attempts.
type MaxAttemptsJSON struct {
	// MaxAttempts is the new limit; 0 restores the relay's default.
	MaxAttempts *int `json:"max_attempts"`
}

func (h *Handler) setMaxAttempts(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var body MaxAttemptsJSON
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.MaxAttempts == nil {
		h.fail(w, r, badParamf(`send {"max_attempts": N}, N from 1 to 1000000 or 0 for the relay's default`))
		return
	}
	ctx, cancel := h.dbContext(r)
	defer cancel()
	e, err := h.cfg.Manager.SetMaxAttempts(ctx, id, *body.MaxAttempts)
	h.audit(r, "set_max_attempts", slog.Int64("event_id", id), slog.Int("max_attempts", *body.MaxAttempts), errAttr(err))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewEventJSON(&e, true))
}
