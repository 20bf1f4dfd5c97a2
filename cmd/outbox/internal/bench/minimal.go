package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// ErrMinimalNeedsPostgres is returned by ReferenceMinimal on SQLite and
// MySQL/MariaDB: its statements are PostgreSQL's.
var ErrMinimalNeedsPostgres = errors.New("the reference-minimal scenario runs on PostgreSQL only")

// minimalTable is the reference-minimal scenario's table, in the scratch
// schema next to the migrated (and unused) outbox tables.
const minimalTable = "outbox_minimal"

// ReferenceMinimal drains a pre-filled backlog of Events events with the
// minimal two-write loop of issue 14 on a minimal table of its own: Workers
// loops that claim BatchSize events with one UPDATE (status processing, a
// 30 s lease, attempts + 1) and mark them processed with a second, unfenced
// one, on connections with durable commits (synchronous_commit on, unlike
// the relay's). It is the yardstick for a relay that writes each event
// twice, beside reference (the same loop on the outbox's own table).
// PostgreSQL only: elsewhere it returns ErrMinimalNeedsPostgres.
func (r *Runner) ReferenceMinimal(ctx context.Context) (Report, error) {
	rep := Report{Scenario: ScenarioReferenceMinimal, Retention: string(outbox.RetainProcessed)}
	if _, ok := r.st.(*pgStore); !ok {
		return rep, ErrMinimalNeedsPostgres
	}
	err := r.withScratch(ctx, &rep, func(sc scratch) error {
		ps := sc.(*pgScratch)
		// tableSize and the pools read and wait on the minimal table.
		s := *ps
		s.table = pgx.Identifier{ps.schemaName, minimalTable}.Sanitize()
		r.progress("reference-minimal: pre-filling %d events", r.cfg.Events)
		if err := s.prefillMinimal(ctx, r.cfg.Events, r.payload); err != nil {
			return err
		}
		before, err := s.tableSize(ctx)
		if err != nil {
			return err
		}
		rep.Table.Before = before

		p := &pgPools{s: &s}
		defer p.close(ctx)
		pc := s.st.base.Copy()
		pc.ConnConfig.RuntimeParams["application_name"] = "bench-reference-minimal:" + s.schemaName
		// Durable commits, as the hand-written loop measured in
		// shared/perf-notes.md had: no ConfigureRelayPool here.
		pc.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
		pc.MaxConns = int32(min(r.cfg.Workers+1, 1<<20))
		pool, err := p.connect(ctx, pc)
		if err != nil {
			return err
		}
		rec := newRecorder(r.cfg.Sink, r.cfg.Events)
		loop := newReferenceLoop(newPgMinimal(pool, s.table), r.cfg, rec)
		r.progress("reference-minimal: relaying %d events", r.cfg.Events)
		rss := startRSS()
		start := time.Now()
		runErr := loop.run(ctx)
		elapsed := time.Since(start)
		rss.stopInto(&rep)
		if sinkErr := rec.err(); sinkErr != nil {
			runErr = sinkErr
		}
		if runErr != nil {
			return fmt.Errorf("reference-minimal: %w", runErr)
		}
		p.close(ctx)

		var processed, other int64
		if err := s.st.ctl.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status <> 'processed') FROM `+s.table).
			Scan(&processed, &other); err != nil {
			return fmt.Errorf("reference-minimal: count statuses: %w", err)
		}
		if processed != int64(r.cfg.Events) || other != 0 {
			return fmt.Errorf("reference-minimal: %d of %d events processed, %d not", processed, r.cfg.Events, other)
		}
		if rep.Table.After, err = s.tableSize(ctx); err != nil {
			return err
		}
		delivered, dups, _ := rec.counts()
		rep.Events, rep.Duplicates, rep.Seconds = delivered, dups, elapsed.Seconds()
		rep.EventsPerS = float64(delivered) / elapsed.Seconds()
		return nil
	})
	return rep, err
}

// prefillMinimal creates the minimal table in s.table and fills it with n
// pending events as prefill does, then settles it. The table has the
// columns of the hand-written loop in shared/perf-notes.md, its primary key
// (for the mark's id = ANY) and one partial index on id for the pending
// rows, which the claim walks in id order.
func (s *pgScratch) prefillMinimal(ctx context.Context, n int, payload []byte) error {
	index := pgx.Identifier{minimalTable + "_pending"}.Sanitize()
	_, err := s.st.ctl.Exec(ctx, `CREATE TABLE `+s.table+` (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz,
    attempts int NOT NULL DEFAULT 0,
    processed_at timestamptz
);
CREATE INDEX `+index+` ON `+s.table+` (id) WHERE status = 'pending'`)
	if err != nil {
		return fmt.Errorf("create the minimal table: %w", err)
	}
	if _, err := s.st.ctl.Exec(ctx, `INSERT INTO `+s.table+` (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', g::text, 'order.created', $2::jsonb FROM generate_series(1, $1::int) AS g`, n, string(payload)); err != nil {
		return fmt.Errorf("pre-fill %d events: %w", n, err)
	}
	if err := s.st.flushOwnStats(ctx); err != nil {
		return err
	}
	if _, err := s.st.ctl.Exec(ctx, `VACUUM ANALYZE `+s.table); err != nil {
		return fmt.Errorf("vacuum analyze: %w", err)
	}
	return s.settle(ctx)
}

// pgMinimal is the minimal loop's two statements.
type pgMinimal struct {
	pool              *pgxpool.Pool
	claimSQL, markSQL string
}

func newPgMinimal(pool *pgxpool.Pool, table string) *pgMinimal {
	// id = ANY(ARRAY(subquery)) keeps the partial index's range scan
	// under a generic plan and locks no more than the limit (the IN form
	// can do both wrong: shared/perf-notes.md).
	claim := `UPDATE ` + table + `
SET status = 'processing', locked_until = now() + interval '30 seconds', attempts = attempts + 1
WHERE id = ANY(ARRAY(
    SELECT id FROM ` + table + `
    WHERE status = 'pending'
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
))
RETURNING id, payload`
	// Unfenced, as in the hand-written loop: the primary key finds the rows.
	mark := `UPDATE ` + table + ` SET status = 'processed', processed_at = now(), locked_until = NULL WHERE id = ANY($1::bigint[])`
	return &pgMinimal{pool: pool, claimSQL: claim, markSQL: mark}
}

func (p *pgMinimal) claim(ctx context.Context, n int) ([]outbox.Event, error) {
	rows, err := p.pool.Query(ctx, p.claimSQL, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := make([]outbox.Event, 0, n)
	for rows.Next() {
		// The table's event type and aggregate are constants of the
		// pre-fill: filled in here, not read, as the loop reads only
		// id and payload.
		e := outbox.Event{EventType: "order.created", AggregateType: "order"}
		if err := rows.Scan(&e.ID, &e.Payload); err != nil {
			return nil, err
		}
		e.AggregateID = strconv.FormatInt(e.ID, 10)
		events = append(events, e)
	}
	return events, rows.Err()
}

func (p *pgMinimal) mark(ctx context.Context, ids []int64) (int64, error) {
	tag, err := p.pool.Exec(ctx, p.markSQL, ids)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
