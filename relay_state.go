package outbox

// Running reports whether the relay is claiming events: true once Start has
// returned nil, false again from the moment Stop begins (Run's context
// ending), so a readiness probe can turn a stopping relay away before its
// in-flight batches finish.
func (r *Relay) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started && !r.isStopping()
}
