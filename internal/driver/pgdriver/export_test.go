package pgdriver

import (
	"context"

	"github.com/outboxkit/outbox/internal/driver"
)

// ClaimSQL exposes the claim statement to plan tests.
func ClaimSQL(d *Driver) string { return d.q.claim }

// ClaimCaptureSQL exposes the table path's claim of a capture relay to
// plan tests.
func ClaimCaptureSQL(d *Driver) string { return d.q.claimCapture }

// ClaimCaptureFilteredSQL exposes the table path's claim of a capture
// relay serving some event types to plan tests.
func ClaimCaptureFilteredSQL(d *Driver) string { return d.q.claimCaptureFiltered }

// ClaimBudgetSQL exposes the claim statement with a byte budget to plan
// tests.
func ClaimBudgetSQL(d *Driver) string { return d.q.claimBudget }

// PurgeArchiveSQL exposes the archive's batched purge to plan tests.
func PurgeArchiveSQL(d *Driver) string { return d.q.purgeArchive }

// DeadLetterSQL exposes the dead-letter slow retry's statements to plan
// tests.
func DeadLetterSQL(d *Driver) (schedule, retry string) {
	return scheduleDeadLetterSQL(d.table), retryDeadLetterSQL(d.table)
}

// OrderedClaimSQL exposes the ordered claim's statements (the windowed
// first try, then the whole-backlog one), block policy, to plan tests.
func OrderedClaimSQL(d *Driver) (window, full string) {
	return d.ordered[0].claimWindow, d.ordered[0].claim
}

// ReplayBatchSQL exposes a replay read's statement to plan tests.
func ReplayBatchSQL(d *Driver, p driver.ReplayParams) (string, []any, error) {
	return d.replayBatchSQL(p)
}

// OwnedPartitionSQL exposes the partition read (block policy) and the processed
// mark to plan tests.
func OwnedPartitionSQL(d *Driver) (read, mark string) { return d.parts.read[0], d.parts.markProcessed }

// CountSchemasChunked is CountSchemas with chunk schemas a statement, so
// that a test shows the statement count with a few schemas.
func CountSchemasChunked(ctx context.Context, d *Driver, schemas []string, chunk int) ([]driver.SchemaStats, error) {
	return d.countSchemas(ctx, schemas, chunk)
}

// CaptureSettleSQL exposes the capture stream's marks (delivered for
// retention, failed) to plan tests.
func CaptureSettleSQL(d *Driver, retention driver.Retention) (delivered, failed string) {
	return captureSettleSQL(d, retention), captureFailSQL(d)
}

// RecordingPartitionSQL exposes the partition read (block policy) that
// records its batch in flight.
func RecordingPartitionSQL(d *Driver) string { return d.parts.readRecord[0] }

// UnorderedPartitionSQL exposes the partition read of a relay that keeps
// no order, recording its batch in flight.
func UnorderedPartitionSQL(d *Driver) string { return d.parts.readRecord[readUnordered] }
