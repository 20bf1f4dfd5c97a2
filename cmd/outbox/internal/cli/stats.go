package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// statsJSON is the counts of the stats --json document: the admin API's
// CountsJSON, so both speak one contract.
type statsJSON = outboxadmin.CountsJSON

// statsDocJSON is the one-shot stats --json document: the counts, the
// tables' health, the relays and, on PostgreSQL, the aggregates an ordered
// relay holds back (block policy): their first unfinished event failed while
// later events wait.
type statsDocJSON struct {
	statsRelaysJSON
	BlockedAggregates *outbox.BlockedAggregates `json:"blocked_aggregates,omitempty"`
	// Consumers is the inbox's backlog per consumer, present when the
	// schema has inbox_messages (outbox migrate --inbox).
	Consumers *[]consumerLagJSON `json:"consumers,omitempty"`
	// Capture is the logical replication slots of relay --capture
	// logical, present on PostgreSQL only: the admin API's CaptureJSON.
	Capture *outboxadmin.CaptureJSON `json:"capture,omitempty"`
}

// consumerLagJSON is one consumer's backlog in inbox_messages: the admin
// API's ConsumerLagJSON, so both speak one contract.
type consumerLagJSON = outboxadmin.ConsumerLagJSON

// consumerLags reads the inbox's backlog, nil when the schema has no inbox.
func (a *app) consumerLags(ctx context.Context, db outbox.Database) (*[]consumerLagJSON, error) {
	v, err := outboxmigrate.InboxVersion(ctx, db, outboxmigrate.Config{Schema: a.schema})
	if err != nil || v == 0 {
		return nil, err
	}
	lags, err := inbox.Lag(ctx, db, a.schema)
	if err != nil {
		return nil, err
	}
	var reports []inbox.BrokerReport
	if v >= inboxBrokerReportsVersion {
		if reports, err = inbox.BrokerReports(ctx, db, a.schema); err != nil {
			return nil, err
		}
	}
	out := outboxadmin.NewConsumerLagsJSON(lags, reports)
	return &out, nil
}

// inboxBrokerReportsVersion is the inbox migration that added
// inbox_consumers: an older inbox has no broker reports to read.
const inboxBrokerReportsVersion = 2

// inboxOnlyStatsJSON is stats --json on a schema with the inbox and no
// outbox table: a consumer's own database.
type inboxOnlyStatsJSON struct {
	// OutboxAbsent is true: the schema has no outbox_events.
	OutboxAbsent bool               `json:"outbox_absent"`
	Consumers    *[]consumerLagJSON `json:"consumers"`
}

// inboxOnlyStats reports the consumers on a schema that has the inbox but
// no outbox table, and says the outbox is absent; noTable is the error the
// outbox's check returned, returned as it is when there is no inbox
// either.
func (a *app) inboxOnlyStats(ctx context.Context, noTable error, asJSON bool) error {
	db, closer, _, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	consumers, err := a.consumerLags(ctx, db)
	if err != nil {
		return err
	}
	if consumers == nil {
		return noTable
	}
	if asJSON {
		return writeJSON(a.stdout, inboxOnlyStatsJSON{OutboxAbsent: true, Consumers: consumers})
	}
	if _, err := fmt.Fprintf(a.stdout, "outbox: absent (schema %s has no outbox_events; this database only receives)\n", safeText(a.schema)); err != nil {
		return err
	}
	return writeConsumers(a.stdout, consumers)
}

// writeConsumers lists the consumers with a backlog.
func writeConsumers(w io.Writer, c *[]consumerLagJSON) error {
	if c == nil {
		return nil
	}
	if _, err := fmt.Fprintf(w, "\ninbox consumers with unprocessed messages or a broker report: %d\n", len(*c)); err != nil {
		return err
	}
	if len(*c) == 0 {
		return nil
	}
	tw := newTable(w, 2)
	tw.row("consumer\tunprocessed\toldest unprocessed\tbroker pending\n")
	for _, l := range *c {
		tw.row("%s\t%d\t%s\t%s\n", safeText(l.Consumer), l.Unprocessed, seconds(l.OldestUnprocessedAgeSeconds).Round(time.Millisecond), brokerPendingText(l))
	}
	return tw.flush()
}

// brokerPendingText is a consumer's broker report in a stats row: "-"
// without one, the count and its age, and STALE when it is not current.
func brokerPendingText(l consumerLagJSON) string {
	if l.BrokerPending == nil || l.BrokerReportedAgeSeconds == nil {
		return "-"
	}
	s := fmt.Sprintf("%d (%s, reported %s ago)", *l.BrokerPending, safeText(l.Broker), seconds(*l.BrokerReportedAgeSeconds).Round(time.Second))
	if l.BrokerPendingStale != nil && *l.BrokerPendingStale {
		s += " STALE: the receiver stopped reporting"
	}
	return s
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// blockedListLimit is how many blocked aggregates stats lists.
const blockedListLimit = 20

// statsIntervalDefault is how often stats --watch refreshes.
const statsIntervalDefault = 2 * time.Second

func (a *app) statsCommand() *cobra.Command {
	var (
		asJSON   bool
		watch    bool
		interval time.Duration
		tenants  tenantFlags
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count events per status and show the relay's lag and the table's health",
		Long: `stats counts the events in each status and shows how long the oldest due
pending event has waited: the relay's lag. It also shows the outbox tables'
health from the database's catalog: their size, the dead tuples vacuum has
yet to remove (PostgreSQL), and the oldest transaction in the database,
which keeps vacuum (InnoDB's purge on MySQL/MariaDB) from removing them,
and the running relays, idle ones too, from their heartbeat rows: each
relay's sink, version and last claim, and whether it is stale (missed
three heartbeats). With --json it prints one object with the keys pending,
processing, processed, failed, oldest_pending_age_seconds,
dead_letter_retry_waiting, dead_letter_retry_next_due, tables,
vacuum_horizon, innodb_history_length, sqlite_file and relays (as the
admin API's GET /api/relays); a figure the database does not report is
null. On PostgreSQL it also has capture: the logical replication slots of relay
--capture logical (as the admin API's GET /api/capture: available, slots
with slot, exists, active, active_pid, retained_bytes, unconfirmed_bytes,
confirmed_flush_lsn, wal_status, safe_wal_size, holder, holder_until and
holder_expired, and denied when the role may not read them); without
--json they are listed only when a slot is recorded. It also has blocked_aggregates: the aggregates whose
ordered delivery (relay --ordering aggregate) waits behind a failed first
event, with total and the first 20 (aggregate_type, aggregate_id, head_id,
head_status, waiting). Failed
events waiting for a slow retry (relay --dead-letter-retry) show as
"dead-letter retry" with the time the next one is due. When the schema also
holds the consumer side's inbox_messages (outbox migrate --inbox), it lists
each consumer with unprocessed messages and the oldest one's age, and the
broker's pending count its receiver (receive --from nats|kafka) last
recorded, with how long ago, marked STALE when older than three of the
receiver's 5s reads (with --json, consumers: consumer, unprocessed,
oldest_unprocessed_age_seconds, and with a broker report broker,
broker_pending, broker_reported_age_seconds, broker_pending_stale).
On a consumer's database, with the inbox and no outbox table, it says the
outbox is absent and lists the consumers (with --json, outbox_absent: true
and consumers only).

With --watch it refreshes all of it every --interval until interrupted,
and adds the events written and published per second since the last
refresh: on a terminal it redraws in place, otherwise it prints one block
per interval (with --json, one object per line, with the keys at,
written_per_second and published_per_second too, and without relays).
Each refresh counts the
processed events as stats does; on a table with a long history, use a
longer --interval.`,
		Example: "  outbox stats\n  outbox stats --watch --interval 5s",
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("interval") && !watch {
				return usagef("--interval needs --watch")
			}
			if interval < 100*time.Millisecond {
				return usagef("invalid --interval %s: use at least 100ms, such as 2s", interval)
			}
			if tenants.on() {
				return a.tenantStats(cmd.Context(), &tenants, asJSON, watch, interval)
			}
			m, db, closePool, err := a.managerDB(cmd.Context())
			if errors.Is(err, outbox.ErrNoTable) && !watch {
				return a.inboxOnlyStats(cmd.Context(), err, asJSON)
			}
			if err != nil {
				return err
			}
			defer closePool()
			if watch {
				return a.watchStats(cmd.Context(), m, interval, asJSON)
			}
			s, err := m.Stats(cmd.Context())
			if err != nil {
				return err
			}
			h, err := m.TableHealth(cmd.Context())
			if err != nil {
				return err
			}
			relays, err := m.Relays(cmd.Context())
			if err != nil {
				return err
			}
			var blocked *outbox.BlockedAggregates
			switch b, err := m.BlockedAggregates(cmd.Context(), outbox.OrderedFailureBlock, blockedListLimit); {
			case err == nil:
				blocked = &b
			case !errors.Is(err, outbox.ErrOrderingUnsupported):
				return err
			}
			consumers, err := a.consumerLags(cmd.Context(), db)
			if err != nil {
				return err
			}
			slots, err := m.CaptureSlots(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				doc := statsDocJSON{statsRelaysJSON{healthDocument(statsDocument(s), h), outboxadmin.NewRelaysJSON(relays)}, blocked, consumers, nil}
				if slots != nil {
					c := outboxadmin.NewCaptureJSON(slots)
					doc.Capture = &c
				}
				return writeJSON(a.stdout, doc)
			}
			if err := writeStatsTable(a.stdout, s, nil, h, relays); err != nil {
				return err
			}
			if err := writeBlocked(a.stdout, blocked); err != nil {
				return err
			}
			if err := writeCaptureSlots(a.stdout, slots); err != nil {
				return err
			}
			return writeConsumers(a.stdout, consumers)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&watch, "watch", false, "refresh until interrupted, with written and published rates")
	cmd.Flags().DurationVar(&interval, "interval", statsIntervalDefault, "how often --watch refreshes")
	tenants.addFlags(cmd.Flags(), "count, per tenant and in total, every schema")
	return cmd
}

func statsDocument(s outbox.Stats) statsJSON { return outboxadmin.NewCountsJSON(s) }

// writeBlocked lists the blocked aggregates, if there are any.
func writeBlocked(w io.Writer, b *outbox.BlockedAggregates) error {
	if b == nil || b.Total == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(w, "\nblocked aggregates: %d (ordered delivery waits behind a failed event; retry or discard it)\n", b.Total); err != nil {
		return err
	}
	tw := newTable(w, 2)
	tw.row("aggregate\thead event\thead status\twaiting\n")
	for _, a := range b.Aggregates {
		tw.row("%s/%s\t%d\t%s\t%d\n", safeText(a.AggregateType), safeText(a.AggregateID), a.HeadID, a.HeadStatus, a.Waiting)
	}
	return tw.flush()
}

// writeStatsTable writes the stats, the rates of flow when not nil, and the
// tables' health.
func writeStatsTable(w io.Writer, s outbox.Stats, flow *outbox.Flow, h outbox.TableHealth, relays []outbox.RelayInfo) error {
	tw := newTable(w, 2)
	statsRows(tw, s, flow)
	healthRows(tw, h)
	relayRows(tw, relays)
	return tw.flush()
}

func statsRows(tw *table, s outbox.Stats, flow *outbox.Flow) {
	tw.row("pending\t%d\n", s.Pending)
	tw.row("processing\t%d\n", s.Processing)
	tw.row("processed\t%d\n", s.Processed)
	tw.row("failed\t%d\n", s.Failed)
	tw.row("oldest pending age\t%s\n", s.OldestPendingAge.Round(time.Millisecond))
	deadLetterRetryRow(tw, s.DeadLetterRetry)
	if flow != nil {
		written, published := "-", "-"
		if secs := flow.Interval.Seconds(); secs > 0 {
			written = fmt.Sprintf("%.1f/s", float64(flow.Written)/secs)
			published = fmt.Sprintf("%.1f/s", float64(flow.Published)/secs)
		}
		tw.row("written\t%s\n", written)
		tw.row("published\t%s\n", published)
	}
}

// statsWatchJSON is one line of stats --watch --json.
type statsWatchJSON struct {
	At time.Time `json:"at"`
	statsHealthJSON
	WrittenPerSecond   *float64 `json:"written_per_second"`
	PublishedPerSecond *float64 `json:"published_per_second"`
}

// watchStats shows the stats every interval until ctx ends. The rates come
// from outbox.FlowMeter, which reads only cheap counters.
func (a *app) watchStats(ctx context.Context, m *outbox.Manager, interval time.Duration, asJSON bool) error {
	v := &statsView{w: a.stdout, interval: interval, json: asJSON, tty: !asJSON && isTerminal(a.stdout.w)}
	var meter outbox.FlowMeter
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s, err := m.Stats(ctx)
		var (
			h   outbox.TableHealth
			smp outbox.Sample
		)
		if err == nil {
			h, err = m.TableHealth(ctx)
		}
		if err == nil {
			if smp, err = m.Sample(ctx); err == nil {
				flow, ok := meter.Add(smp)
				if !ok {
					flow = outbox.Flow{}
				}
				err = v.show(smp.At, s, flow, h)
			}
		}
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of a watch
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// statsView draws stats --watch: redrawn in place on a terminal, one block
// (or JSON line) per refresh elsewhere.
type statsView struct {
	w        io.Writer
	interval time.Duration
	json     bool
	tty      bool
	lines    int // lines drawn last time, to redraw over them
}

func (v *statsView) show(at time.Time, s outbox.Stats, flow outbox.Flow, h outbox.TableHealth) error {
	if v.json {
		doc := statsWatchJSON{At: at.UTC().Truncate(time.Millisecond), statsHealthJSON: healthDocument(statsDocument(s), h)}
		if secs := flow.Interval.Seconds(); secs > 0 {
			written := math.Round(float64(flow.Written)/secs*1000) / 1000
			published := math.Round(float64(flow.Published)/secs*1000) / 1000
			doc.WrittenPerSecond, doc.PublishedPerSecond = &written, &published
		}
		data, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = v.w.Write(append(data, '\n'))
		return err
	}
	var b bytes.Buffer
	if v.tty {
		fmt.Fprintf(&b, "outbox stats, every %s, at %s (Ctrl-C to stop)\n\n", v.interval, at.Format(time.TimeOnly))
	} else {
		fmt.Fprintf(&b, "# %s\n", at.UTC().Format(time.RFC3339))
	}
	if err := writeStatsTable(&b, s, &flow, h, nil); err != nil {
		return err
	}
	if !v.tty {
		b.WriteString("\n")
	}
	block := b.String()
	if v.tty && v.lines > 0 {
		// Up to the first line of the last block, and clear below.
		block = fmt.Sprintf("\033[%dA\r\033[J", v.lines) + block
	}
	v.lines = strings.Count(b.String(), "\n")
	_, err := io.WriteString(v.w, block)
	return err
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
