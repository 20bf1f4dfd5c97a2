package outboxadmin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/outboxkit/outbox"
)

// ReplayToSinkJSON is the body of POST /api/events/replay-to-sink: the
// filter selecting delivered events (its min_attempts must be absent),
// and, with dry_run, only a count. AfterID resumes an earlier replay.
type ReplayToSinkJSON struct {
	Filter  FilterJSON `json:"filter"`
	DryRun  bool       `json:"dry_run,omitempty"`
	AfterID int64      `json:"after_id,omitempty"`
}

// ReplayToSinkResultJSON answers POST /api/events/replay-to-sink, and is
// what outbox events replay --sink --json prints: the count for a dry run;
// otherwise what was published, and where to resume (after_id = last_id)
// when Complete is false.
type ReplayToSinkResultJSON struct {
	// Sink names the sink, without credentials.
	Sink   string `json:"sink"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Count is the dry run's count, or the events published.
	Count int64 `json:"count"`
	// Published counts the events the sink acknowledged.
	Published int64 `json:"published"`
	// AfterID is the ID the replay started after.
	AfterID int64 `json:"after_id"`
	// LastID is the ID up to which every selected event was published.
	LastID int64 `json:"last_id"`
	// UpToID is the replay's bound: the highest event ID when it started.
	UpToID int64 `json:"up_to_id"`
	// Complete is false when the replay stopped early.
	Complete bool   `json:"complete"`
	Error    string `json:"error,omitempty"`
}

// NewReplayToSinkResultJSON is the document of a replay's result.
func NewReplayToSinkResultJSON(sink string, afterID int64, res outbox.ReplayResult, complete bool) ReplayToSinkResultJSON {
	return ReplayToSinkResultJSON{Sink: sink, Count: res.Published, Published: res.Published, AfterID: afterID,
		LastID: res.LastID, UpToID: res.UpToID, Complete: complete}
}

// replayToSink publishes the delivered events a filter selects to the
// configured replay sink, or counts them for a dry run. The sink is the
// handler's own (Config.ReplaySink): nothing in the request names one.
func (h *Handler) replayToSink(w http.ResponseWriter, r *http.Request) {
	if h.cfg.ReplaySink == nil {
		writeError(w, http.StatusNotFound, "no replay sink is configured: start the dashboard with one (outbox admin --replay-sink URL, or outboxadmin.Config.ReplaySink)")
		return
	}
	var body ReplayToSinkJSON
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			h.fail(w, r, err)
			return
		}
		h.fail(w, r, badParamf(`invalid JSON body: %v: send {"filter": {…}, "dry_run": true}`, err))
		return
	}
	if err := checkFilterText(&body.Filter); err != nil {
		h.fail(w, r, err)
		return
	}
	p := outbox.ReplayParams{EventFilter: body.Filter.filter(), AfterID: body.AfterID}
	out := ReplayToSinkResultJSON{Sink: h.cfg.ReplaySinkName, DryRun: body.DryRun, AfterID: body.AfterID}
	if body.DryRun {
		ctx, cancel := h.dbContext(r)
		defer cancel()
		n, err := h.cfg.Manager.CountReplay(ctx, p)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		out.Count = n
		writeJSON(w, http.StatusOK, out)
		return
	}
	// Like the bulk actions, a replay may outlast QueryTimeout: it is
	// bounded per batch, and stops when the client goes away.
	res, err := h.cfg.Manager.ReplayTo(r.Context(), h.cfg.ReplaySink, p)
	h.audit(r, "replay_to_sink", slog.String("sink", h.cfg.ReplaySinkName), slog.Any("filter", body.Filter),
		slog.Int64("after_id", body.AfterID), slog.Int64("published", res.Published), slog.Int64("last_id", res.LastID), errAttr(err))
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		h.fail(w, r, err)
		return
	}
	out = NewReplayToSinkResultJSON(h.cfg.ReplaySinkName, body.AfterID, res, err == nil)
	status := http.StatusOK
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		// The sink refused: say so, and where to resume. The sink's error
		// may name internals; it is in the server's log.
		h.log.Error("replay to sink stopped", slog.String("sink", h.cfg.ReplaySinkName), slog.Any("error", err))
		out.Error = "the replay stopped: the sink refused an event (see the server's log); resume with after_id " + strconv.FormatInt(res.LastID, 10)
		status = http.StatusBadGateway
	}
	writeJSON(w, status, out)
}
