package cli

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxcdc"
)

// The values of relay --capture.
const (
	capturePoll    = "poll"
	captureLogical = "logical"
)

// checkCapture refuses --capture values and combinations the capture relay
// does not take.
func checkCapture(m *merger, rf *relayFlags, ordering outbox.Ordering) error {
	switch rf.capture {
	case capturePoll:
		for _, flag := range []string{"capture-group", "max-slot-lag"} {
			if m.given(flag) {
				return usagef("%s needs --capture logical", m.name(flag))
			}
		}
		return nil
	case captureLogical:
	default:
		return usagef("invalid %s %q: use poll or logical", m.name("capture"), clip(rf.capture))
	}
	switch {
	case rf.group == "":
		return usagef("invalid %s: is empty: name the relay group, or leave it out for %q", m.name("capture-group"), outboxcdc.GroupDefault)
	case rf.maxSlotLag <= 0:
		return usagef("invalid %s %d: use a positive number of bytes", m.name("max-slot-lag"), rf.maxSlotLag)
	case rf.cfg.MaxBatchBytes > 0:
		return usagef("%s cannot be used with --capture logical", m.name("max-batch-bytes"))
	case ordering == outbox.OrderingAggregate:
		return usagef("%s aggregate cannot be used with --capture logical: the stream delivers every event in commit order already", m.name("ordering"))
	case rf.leases == string(outbox.LeasesPartitions):
		return usagef("%s partitions cannot be used with --capture logical: the table path of a capture relay claims under row leases; use --leases auto or rows", m.name("leases"))
	}
	return nil
}

// runCaptureRelay runs the capture relay (outboxcdc) and its table path, a
// relay that claims only the events the stream leaves to the table
// (written before the slot, delayed, or failed from the stream), until ctx
// ends, then stops both gracefully.
func (a *app) runCaptureRelay(ctx context.Context, pc *pgxpool.Config, cfg outbox.RelayConfig, sinkName string, obs *observability, group string, maxSlotLag int64) error {
	if cfg.PgBouncer {
		return usagef("invalid %s: logical replication needs a direct connection to PostgreSQL, which PgBouncer does not pass; point --database-url at the server for --capture logical", a.globalName("pgbouncer"))
	}
	outbox.ConfigureRelayPool(pc, cfg.RelayID)
	// The table path's workers and rescue, plus the stream's marks, lease
	// row and lag reads.
	pc.MaxConns = max(pc.MaxConns, int32(min(cfg.Workers+5, 1<<20)))
	pool, err := a.open(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := outbox.Postgres(pool)
	if err := outbox.NewManager(db, outbox.ManagerConfig{Schema: cfg.Schema}).Ping(ctx); err != nil {
		return a.tableError(err)
	}
	observers, err := a.startObservers(ctx, obs, db, &cfg, sinkName)
	if err != nil {
		return err
	}
	defer observers.stop()
	ccfg := outboxcdc.Config{Sink: cfg.Sink, Schema: cfg.Schema, Group: group, RelayID: cfg.RelayID,
		Retention: cfg.Retention, BatchSize: cfg.BatchSize, SinkTimeout: cfg.SinkTimeout, EventTypes: cfg.EventTypes,
		MaxAttempts: cfg.MaxAttempts, BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		MaxSlotLag: maxSlotLag, Logger: a.logger}
	if observers.metrics != nil {
		slot := outboxcdc.SlotName(cfg.Schema, group)
		ccfg.OnSlotLag = func(n int64) { observers.metrics.SetReplicationSlotLag(slot, n) }
		ccfg.OnPublish = observers.metrics.ObserveCapture
	}
	stream, err := outboxcdc.New(pool, &pc.ConnConfig.Config, ccfg)
	if err != nil {
		return relayConfigError(err)
	}
	slot, err := stream.Prepare(ctx)
	if err != nil {
		if errors.Is(err, outboxcdc.ErrWALLevel) {
			return usagef("--capture logical: %v", err)
		}
		return err
	}
	cfg.CaptureSlot = slot.Name
	relay, err := outbox.NewRelay(db, cfg)
	if err != nil {
		return relayConfigError(err)
	}
	observers.setRelay(relay)
	a.logger.Info("relay streaming from a logical replication slot, retries from the table",
		"sink", sinkName, "relay_id", cfg.RelayID, "retention", string(cfg.Retention), "slot", slot.Name,
		"application_name", pc.ConnConfig.RuntimeParams["application_name"])

	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	stopNote := context.AfterFunc(ctx, func() {
		a.logger.Info("shutdown signal received; finishing in-flight batches, up to --shutdown-timeout",
			"shutdown_timeout", cfg.ShutdownTimeout)
		stopRun()
	})
	defer stopNote()
	var (
		wg                  sync.WaitGroup
		streamErr, tableErr error
	)
	wg.Go(func() {
		streamErr = stream.Run(runCtx)
		stopRun() // a stream that cannot run takes the table path down too
	})
	wg.Go(func() {
		tableErr = relay.Run(runCtx)
		stopRun()
	})
	wg.Wait()
	return errors.Join(streamErr, tableErr)
}

// warnCaptureSlots reports, once at a poll relay's start, the capture
// slots of the schema: one that no relay streams from keeps WAL on the
// server's disk; one that a capture relay streams from means this poll
// relay competes with it for fresh events, each then possibly delivered
// twice, unless the two serve different event types (types: this poll
// relay's). PgBouncer in transaction mode hides nothing here: the query is
// plain.
func (a *app) warnCaptureSlots(ctx context.Context, pool *pgxpool.Pool, schema string, types []string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	slots, err := outboxcdc.Slots(ctx, pool, schema)
	if err != nil {
		a.logger.Debug("reading capture slots failed", "error", err.Error())
		return
	}
	for _, s := range slots {
		if s.Active && len(types) > 0 {
			a.logger.Info("a relay --capture logical streams from this table: make sure it serves other --event-types than this relay, or each event of a type both serve may be delivered twice (docs/cdc.md, Both modes side by side)",
				"slot", s.Name, "event_types", types)
			continue
		}
		if s.Active {
			a.logger.Warn("a relay --capture logical streams from this table: this poll relay claims the same fresh events, and each may be delivered twice; run it on another schema, or stop it and let the capture relays' table path retry failures (docs/cdc.md, Both modes side by side)",
				"slot", s.Name)
			continue
		}
		a.logger.Warn("a logical replication slot of relay --capture logical is left behind: no relay streams from it, and it keeps WAL on the database server's disk until it is used or dropped; run outbox relay --capture logical for its group, or drop it with outbox migrate --drop-logical",
			"slot", s.Name, "retained_bytes", s.RetainedBytes)
	}
}
