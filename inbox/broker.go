package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/driver"
)

// BrokerReportStaleIntervals is how many of its receiver's poll intervals
// a BrokerReport may age before it is stale: the receiver stopped, or has
// not read the broker since.
const BrokerReportStaleIntervals = 3

// BrokerReport is what a consumer's receiver last read from its broker:
// the broker's own count of the consumer's messages not yet acknowledged
// (JetStream's NumPending + NumAckPending, Kafka's group lag), kept in
// inbox_consumers (inbox migration 002) so that outbox stats and the
// dashboard can show it from the database.
type BrokerReport struct {
	// Consumer is the consumer's name.
	Consumer string
	// Broker is the broker's kind, such as nats or kafka.
	Broker string
	// Pending is the broker's pending count.
	Pending int64
	// Interval is the receiver's time between reads of the broker.
	Interval time.Duration
	// Age is how long ago the receiver reported, by the database clock.
	// ReportBroker ignores it.
	Age time.Duration
}

// Stale reports whether r is older than BrokerReportStaleIntervals poll
// intervals: then Pending is not the broker's current count.
func (r BrokerReport) Stale() bool {
	return r.Age > BrokerReportStaleIntervals*r.Interval
}

// ReportBroker records r as its consumer's latest broker report, in one
// statement, reported now by the database clock. Before outbox migrate
// --inbox added inbox_consumers it returns an error wrapping ErrNoTable.
func ReportBroker(ctx context.Context, db outbox.Database, schema string, r BrokerReport) error {
	if r.Consumer == "" || len(r.Consumer) > MaxConsumerLen {
		return &outbox.ConfigError{Field: "Consumer", Err: fmt.Errorf("is %d bytes long: use 1 to %d", len(r.Consumer), MaxConsumerLen)}
	}
	if r.Interval <= 0 {
		return &outbox.ConfigError{Field: "Interval", Err: fmt.Errorf("is %v: use the receiver's positive poll interval", r.Interval)}
	}
	inb, err := inboxDriver(db, schema)
	if err != nil {
		return err
	}
	err = inb.ReportBroker(ctx, driver.BrokerReport{Consumer: r.Consumer, Broker: r.Broker, Pending: r.Pending, Interval: r.Interval})
	if errors.Is(err, driver.ErrNoTable) {
		return fmt.Errorf("inbox: report broker pending: %w (run outbox migrate --inbox)", err)
	}
	if err != nil {
		return fmt.Errorf("inbox: report broker pending: %w", err)
	}
	return nil
}

// BrokerReports returns every consumer's latest broker report, by name,
// stale ones included (see BrokerReport.Stale). A schema whose inbox
// predates inbox_consumers has none: nil and no error.
func BrokerReports(ctx context.Context, db outbox.Database, schema string) ([]BrokerReport, error) {
	inb, err := inboxDriver(db, schema)
	if err != nil {
		return nil, err
	}
	rows, err := inb.InboxBrokerReports(ctx)
	if errors.Is(err, driver.ErrNoTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: broker reports: %w", err)
	}
	out := make([]BrokerReport, len(rows))
	for i, r := range rows {
		out[i] = BrokerReport(r)
	}
	return out, nil
}
