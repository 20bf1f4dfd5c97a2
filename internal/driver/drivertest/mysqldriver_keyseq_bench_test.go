package drivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver/drivertest"
	"github.com/outboxkit/outbox/internal/driver/mysqldriver"
)

// BenchmarkMySQLWriterKeySequence measures what the key-sequence trigger
// costs writers: 8 goroutines insert one event per transaction, each with
// an aggregate of its own (a new outbox_keys row per event, as in bench
// steady), into a schema prepared for ordering and into one that is not,
// in alternating half-second slices, so that a shared, noisy machine slows
// both alike. It reports both rates and their ratio:
//
//	go test -run '^$' -bench MySQLWriterKeySequence -benchtime 20x ./internal/driver/drivertest/
func BenchmarkMySQLWriterKeySequence(b *testing.B) {
	ctx := context.Background()
	open := func(prepare bool) *sql.DB {
		_, db := drivertest.MySQLDatabase(b)
		drv := mysqldriver.New(db, "")
		if _, err := drv.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		if prepare {
			if err := drv.PrepareOrdering(ctx); err != nil {
				b.Fatal(err)
			}
		}
		db.SetMaxOpenConns(16)
		return db
	}
	trig, plain := open(true), open(false)
	w := outbox.NewWriter(outbox.WriterConfig{Dialect: outbox.DialectMariaDB})
	var seq atomic.Int64
	slice := func(db *sql.DB) (int64, time.Duration, error) {
		var (
			n     atomic.Int64
			wg    sync.WaitGroup
			errMu sync.Mutex
			first error
		)
		start := time.Now()
		end := start.Add(500 * time.Millisecond)
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(end) {
					key := fmt.Sprint("agg-", seq.Add(1))
					if _, err := w.WriteSQL(ctx, db, outbox.Message{EventType: "e", AggregateType: "order", AggregateID: key, Payload: `{"n":1}`}); err != nil {
						errMu.Lock()
						first = err
						errMu.Unlock()
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load(), time.Since(start), first
	}
	var nt, np int64
	var dt, dp time.Duration
	b.ResetTimer()
	for i := range b.N {
		order := []*sql.DB{trig, plain}
		if i%2 == 1 {
			order = []*sql.DB{plain, trig}
		}
		for _, db := range order {
			n, d, err := slice(db)
			if err != nil {
				b.Fatal(err)
			}
			if db == trig {
				nt, dt = nt+n, dt+d
			} else {
				np, dp = np+n, dp+d
			}
		}
	}
	tt, tp := float64(nt)/dt.Seconds(), float64(np)/dp.Seconds()
	b.ReportMetric(tt, "tps_trigger")
	b.ReportMetric(tp, "tps_plain")
	b.ReportMetric(tt/tp, "ratio")
}
