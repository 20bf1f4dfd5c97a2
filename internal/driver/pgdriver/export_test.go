package pgdriver

// ClaimSQL exposes the claim statement to plan tests.
func ClaimSQL(d *Driver) string { return d.q.claim }
