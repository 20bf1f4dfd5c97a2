// Package outboxcdc is the change-data-capture relay: it reads committed
// inserts into outbox_events from a PostgreSQL logical replication slot
// (the built-in pgoutput plugin and a publication on the outbox table) and
// publishes them to a sink in commit order, within a millisecond or two of
// the commit, without claiming or rewriting rows on the hot path.
//
// Delivery is at least once. The slot's confirmed position advances only
// past transactions whose every event the sink acknowledged and whose rows
// were settled (marked processed, deleted or archived per Retention, in
// large batches, so the Manager, the CLI's stats, events, replay and purge
// keep working). An event whose publish fails gets the table path's
// failure mark (attempts, backoff, dead-lettering) and from then on belongs
// to the table path: an outbox.Relay with RelayConfig.CaptureSlot set,
// which claims only what the stream leaves to the table. `outbox relay
// --capture logical` runs both.
//
// One relay streams from a slot at a time: PostgreSQL lets one walsender
// use a slot, so the slot is the lock, and a standby retries every
// RetryInterval until the active relay's connection is gone. The lease row
// capture:<slot> in outbox_leases names the holder for operators.
//
// See docs/cdc.md for the server settings, the operational risks of a slot
// left behind (it keeps WAL on the server's disk) and failover.
package outboxcdc

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// Defaults of Config.
const (
	GroupDefault          = "default"
	BatchSizeDefault      = 1000
	StatusIntervalDefault = time.Second
	RetryIntervalDefault  = 2 * time.Second
	LeaseDefault          = 30 * time.Second
	LagIntervalDefault    = 10 * time.Second
	SettleIntervalDefault = 20 * time.Millisecond
	// MaxSlotLagDefault is the retained WAL beyond which the relay warns:
	// 1 GiB.
	MaxSlotLagDefault int64 = 1 << 30
)

// Config configures a capture relay.
type Config struct {
	// Sink receives the events. Required.
	Sink outbox.Sink
	// Schema holds the outbox table. Defaults to "public".
	Schema string
	// Group names the slot and the publication (SlotName): relays of one
	// group share one slot, one streaming and the others standing by.
	// Defaults to GroupDefault.
	Group string
	// RelayID names this relay in the lease row and in locked_by. Defaults
	// to outbox.DefaultRelayID().
	RelayID string
	// Retention says what becomes of a delivered event's row. Defaults to
	// outbox.RetainProcessed.
	Retention outbox.Retention
	// BatchSize is the most events published at once. Defaults to
	// BatchSizeDefault.
	BatchSize int
	// EventTypes, when set, limits the stream to events whose type
	// matches one of these patterns (* matches any run of characters,
	// every other character itself, as outbox.RelayConfig.EventTypes).
	// The stream passes over the others (the slot still advances past
	// them): they are left pending for relays serving their types, and
	// the table path (outbox.RelayConfig.CaptureSlot) must be given the
	// same EventTypes, so that it neither retries nor, by its safety net,
	// claims them. Empty for every type.
	EventTypes []string
	// SinkTimeout bounds one publish. Defaults to
	// outbox.SinkTimeoutDefault.
	SinkTimeout time.Duration
	// MaxAttempts, BackoffBase and BackoffMax are the failure mark's, as in
	// outbox.RelayConfig (an event with max_attempts of its own keeps it).
	MaxAttempts int
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// SettleInterval is how long the settler gathers published events
	// before it marks them in one transaction (or settleMax events,
	// whichever comes first): fewer, larger marks for the writers to
	// compete with, at the cost of a confirmed position (and so the
	// duplicates after a crash) that lags by as much. Defaults to
	// SettleIntervalDefault.
	SettleInterval time.Duration
	// StatusInterval is how often the relay reports its confirmed position
	// to the server. Defaults to StatusIntervalDefault.
	StatusInterval time.Duration
	// RetryInterval is how long a standby (or a relay that lost its
	// connection) waits before it tries the slot again. Defaults to
	// RetryIntervalDefault.
	RetryInterval time.Duration
	// Lease is how long the holder's lease row lasts without renewal
	// (renewed every Lease/3). Defaults to LeaseDefault.
	Lease time.Duration
	// MaxSlotLag is the WAL the slot may retain, in bytes, before the
	// relay warns at every LagInterval. Defaults to MaxSlotLagDefault;
	// negative for no warning.
	MaxSlotLag int64
	// LagInterval is how often the slot's lag is read. Defaults to
	// LagIntervalDefault.
	LagInterval time.Duration
	// OnSlotLag, when set, receives the slot's retained WAL in bytes at
	// every LagInterval (outbox_replication_slot_lag_bytes).
	OnSlotLag func(bytes int64)
	// OnPublish, when set, is called after each publish with the number of
	// events delivered and failed.
	OnPublish func(delivered, failed int)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	if c.Schema == "" {
		c.Schema = "public"
	}
	if c.Group == "" {
		c.Group = GroupDefault
	}
	if c.RelayID == "" {
		c.RelayID = outbox.DefaultRelayID()
	}
	if c.Retention == "" {
		c.Retention = outbox.RetainProcessed
	}
	if c.BatchSize == 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.SinkTimeout == 0 {
		c.SinkTimeout = outbox.SinkTimeoutDefault
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = outbox.MaxAttemptsDefault
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = outbox.BackoffBaseDefault
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = outbox.BackoffMaxDefault
	}
	if c.SettleInterval == 0 {
		c.SettleInterval = SettleIntervalDefault
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = StatusIntervalDefault
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = RetryIntervalDefault
	}
	if c.Lease == 0 {
		c.Lease = LeaseDefault
	}
	if c.MaxSlotLag == 0 {
		c.MaxSlotLag = MaxSlotLagDefault
	}
	if c.LagInterval == 0 {
		c.LagInterval = LagIntervalDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks a configuration with defaults filled in.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &outbox.ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.Sink == nil:
		return bad("Sink", "is nil: the relay needs a sink to publish to")
	case slices.Contains(c.EventTypes, ""):
		return bad("EventTypes", "has an empty entry: use * to match every type")
	case c.BatchSize < 1 || c.BatchSize > outbox.BatchSizeMax:
		return bad("BatchSize", "is %d: use 1 to %d", c.BatchSize, outbox.BatchSizeMax)
	case c.SinkTimeout <= 0:
		return bad("SinkTimeout", "is %v: use a positive duration", c.SinkTimeout)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts", "is %d: use at least 1", c.MaxAttempts)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return bad("BackoffMax", "is %v with BackoffBase %v: use positive durations, the maximum not below the base", c.BackoffMax, c.BackoffBase)
	case c.StatusInterval <= 0 || c.RetryInterval <= 0 || c.LagInterval <= 0 || c.SettleInterval <= 0:
		return bad("StatusInterval", "StatusInterval, RetryInterval, LagInterval and SettleInterval must be positive")
	case c.Lease < time.Second:
		return bad("Lease", "is %v: use at least 1s", c.Lease)
	}
	if _, err := outbox.ParseRetention(string(c.Retention)); err != nil {
		return bad("Retention", "is %q: use processed, delete or archive", c.Retention)
	}
	return nil
}

// SlotName is the name of the replication slot and of the publication of
// the relays of group on the outbox table in schema: outbox_<schema>_<group>,
// lower case, every character other than a-z, 0-9 and _ replaced by _. A
// name longer than PostgreSQL's 63 bytes keeps its first 54 and a hash of
// the whole, so that long schema names do not share a slot.
func SlotName(schema, group string) string {
	if schema == "" {
		schema = "public"
	}
	if group == "" {
		group = GroupDefault
	}
	var b strings.Builder
	for _, r := range strings.ToLower("outbox_" + schema + "_" + group) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s))
		s = fmt.Sprintf("%s_%08x", s[:54], h.Sum32())
	}
	return s
}

// ErrWALLevel is returned when the server's wal_level is not logical.
var ErrWALLevel = errors.New("wal_level is not logical")
