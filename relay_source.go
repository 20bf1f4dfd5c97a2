package outbox

// stampSource sets the relay's tenant and database on claimed events, so
// sinks, hooks and handlers see where each came from (Event.Tenant,
// Event.Database, Event.UniqueID).
func (r *Relay) stampSource(events []Event) {
	if r.cfg.Tenant == "" && r.cfg.Database == "" {
		return
	}
	for i := range events {
		events[i].Tenant, events[i].Database = r.cfg.Tenant, r.cfg.Database
	}
}
