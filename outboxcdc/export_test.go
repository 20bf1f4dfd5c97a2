package outboxcdc

// MatchEventType exposes the stream's event-type matching to tests.
func MatchEventType(pattern, name string) bool { return matchType(pattern, name) }
