package pgdriver

// ClaimSQL exposes the claim statement to plan tests.
func ClaimSQL(d *Driver) string { return d.q.claim }

// PurgeArchiveSQL exposes the archive's batched purge to plan tests.
func PurgeArchiveSQL(d *Driver) string { return d.q.purgeArchive }
