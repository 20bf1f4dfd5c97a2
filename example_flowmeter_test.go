package outbox_test

import (
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
)

// FlowMeter turns successive samples (Manager.Sample, taken every few
// seconds) into rates: here 30 events were written in ten seconds while
// the backlog shrank by 10, so 40 were published, whatever the relays'
// Retention did with them.
func ExampleFlowMeter() {
	at := time.Date(2025, 1, 31, 9, 0, 0, 0, time.UTC)
	var meter outbox.FlowMeter
	samples := []outbox.Sample{
		{At: at, Inserted: 1000, Stats: outbox.Stats{Pending: 50, Failed: 2}},
		{At: at.Add(10 * time.Second), Inserted: 1030, Stats: outbox.Stats{Pending: 38, Processing: 2, Failed: 2}},
	}
	for _, s := range samples {
		if f, ok := meter.Add(s); ok {
			secs := f.Interval.Seconds()
			fmt.Printf("written %.1f/s, published %.1f/s\n", float64(f.Written)/secs, float64(f.Published)/secs)
		}
	}
	// Output: written 3.0/s, published 4.0/s
}
