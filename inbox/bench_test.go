package inbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/inbox"
)

// BenchmarkHandle receives distinct messages one transaction each with
// Handle, next to the hand-written transaction it replaces (INSERT … ON
// CONFLICT DO NOTHING, then the effect): go test -run '^$' -bench Handle
// -benchtime 2000x ./inbox/
func BenchmarkHandle(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		run  func(bb *bundle, i int) error
	}{
		{"inbox.Handle", func(bb *bundle, i int) error {
			m := msg(strconv.Itoa(i))
			_, err := bb.inbox.Handle(ctx, bb.pool, m, func(ctx context.Context, tx pgx.Tx) error { return bb.apply(ctx, tx, m) })
			return err
		}},
		{"hand-written", func(bb *bundle, i int) error {
			m := msg(strconv.Itoa(i))
			return pgx.BeginFunc(ctx, bb.pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `INSERT INTO `+bb.inboxTable()+` (consumer, source, message_id, event_type, payload, headers, processed_at)
VALUES ($1, $2, $3, $4, $5, $6, now()) ON CONFLICT DO NOTHING`, "billing", m.Source, m.ID, m.EventType, string(m.Payload), `{"correlationid":"req-1"}`)
				if err != nil || tag.RowsAffected() == 0 {
					return err
				}
				return bb.apply(ctx, tx, m)
			})
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			bb := setupB(b, inbox.Config{Consumer: "billing"})
			b.ResetTimer()
			for i := range b.N {
				if err := c.run(bb, i); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
