package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"
)

// statsHealthJSON is the stats --json document: the counts and the tables'
// health, with the keys of the admin API's GET /api/health.
type statsHealthJSON struct {
	statsJSON
	outboxadmin.HealthJSON
}

func healthDocument(s statsJSON, h outbox.TableHealth) statsHealthJSON {
	return statsHealthJSON{statsJSON: s, HealthJSON: outboxadmin.NewHealthJSON(h)}
}

// healthRows adds the tables' health to the stats table, leaving out what
// the database does not report.
func healthRows(tw *table, h outbox.TableHealth) {
	for _, t := range h.Tables {
		var parts []string
		if t.LiveRows != nil {
			parts = append(parts, fmt.Sprintf("%d live rows", *t.LiveRows))
		}
		if t.DeadTuples != nil {
			parts = append(parts, fmt.Sprintf("%d dead tuples", *t.DeadTuples))
		}
		if t.Bytes != nil {
			parts = append(parts, bytesize(*t.Bytes))
		}
		if t.FreeBytes != nil {
			parts = append(parts, bytesize(*t.FreeBytes)+" free")
		}
		if len(parts) > 0 {
			tw.row("%s\t%s\n", safeText(t.Table), strings.Join(parts, ", "))
		}
		if v := t.Vacuum; v != nil {
			tw.row("  last vacuum\t%s, auto %s\n", when(v.LastVacuum), when(v.LastAutovacuum))
			tw.row("  last analyze\t%s, auto %s\n", when(v.LastAnalyze), when(v.LastAutoanalyze))
		}
	}
	if f := h.File; f != nil {
		line := fmt.Sprintf("%s, %s free", bytesize(f.Bytes), bytesize(f.FreeBytes))
		if f.WALBytes != nil {
			line += ", WAL " + bytesize(*f.WALBytes)
		}
		tw.row("database file\t%s\n", line)
	}
	if h.HistoryLength != nil {
		tw.row("history list length\t%d\n", *h.HistoryLength)
	}
	if hz := h.Horizon; hz != nil {
		tw.row("vacuum horizon\t%s\n", horizonLine(hz))
	}
}

func when(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// horizonLine says how old the horizon is and who holds it, so that the
// operator can find the session and end it.
func horizonLine(hz *outbox.VacuumHorizon) string {
	w := hz.Holder
	if w == nil {
		return "nothing holds it back"
	}
	var b strings.Builder
	if hz.Age > 0 {
		b.WriteString(hz.Age.Round(time.Second).String() + " old")
	} else {
		b.WriteString("age unknown")
	}
	if hz.XIDAge != nil {
		fmt.Fprintf(&b, " (%d transactions)", *hz.XIDAge)
	}
	b.WriteString(", held by " + strings.ReplaceAll(string(w.Kind), "_", " "))
	if w.PID != 0 {
		fmt.Fprintf(&b, " %d", w.PID)
	}
	if w.Name != "" {
		fmt.Fprintf(&b, " %q", w.Name)
	}
	if w.User != "" {
		b.WriteString(" user " + safeText(w.User))
	}
	if w.Client != "" {
		b.WriteString(" from " + w.Client)
	}
	if w.State != "" {
		b.WriteString(", " + w.State)
	}
	return b.String()
}

// statsRelaysJSON is the stats --json document: the counts, the tables'
// health and the relays, each with the keys of the admin API.
type statsRelaysJSON struct {
	statsHealthJSON
	outboxadmin.RelaysJSON
}

// relayRows adds the relays (Manager.Relays) to the stats table: one line
// each, with what the relay's heartbeat row says.
func relayRows(tw *table, relays []outbox.RelayInfo) {
	if relays == nil {
		return
	}
	tw.row("relays\t%d\n", len(relays))
	for _, r := range relays {
		var parts []string
		switch {
		case !r.Heartbeat:
			parts = append(parts, "leases only (no heartbeat row)")
		case r.Stale:
			parts = append(parts, "stale: last seen "+when(r.LastSeen))
		case r.Lease.Events > 0:
			parts = append(parts, "publishing")
		default:
			parts = append(parts, "idle")
		}
		if r.Sink != "" {
			parts = append(parts, safeText(r.Sink))
		}
		if r.Version != "" {
			parts = append(parts, safeText(r.Version))
		}
		if r.Ordering != "" {
			parts = append(parts, deliveryText(r))
		}
		if r.Heartbeat {
			parts = append(parts, "last claim "+when(r.LastClaim))
		}
		if r.Lease.Events > 0 {
			parts = append(parts, fmt.Sprintf("%d events leased", r.Lease.Events))
		}
		tw.row("  %s\t%s\n", safeText(r.RelayID), strings.Join(parts, ", "))
	}
}

// deliveryText says how a relay delivers: "ordering none, leases rows",
// "ordering aggregate (block), leases partitions".
func deliveryText(r outbox.RelayInfo) string {
	s := "ordering " + safeText(string(r.Ordering))
	if r.OrderedFailure != "" {
		s += " (" + safeText(string(r.OrderedFailure)) + ")"
	}
	return s + ", leases " + safeText(string(r.Leases))
}
