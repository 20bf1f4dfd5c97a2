package cli

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// statsHealthJSON is the stats --json document: the counts and the tables'
// health. A figure the database does not report is null.
type statsHealthJSON struct {
	statsJSON
	Tables              []tableJSON     `json:"tables"`
	VacuumHorizon       *horizonJSON    `json:"vacuum_horizon"`
	InnoDBHistoryLength *int64          `json:"innodb_history_length"`
	SQLiteFile          *sqliteFileJSON `json:"sqlite_file"`
}

type tableJSON struct {
	Table      string      `json:"table"`
	LiveRows   *int64      `json:"live_rows"`
	DeadTuples *int64      `json:"dead_tuples"`
	Bytes      *int64      `json:"bytes"`
	FreeBytes  *int64      `json:"free_bytes"`
	Vacuum     *vacuumJSON `json:"vacuum"`
}

// vacuumJSON has null for never.
type vacuumJSON struct {
	LastVacuum      *time.Time `json:"last_vacuum"`
	LastAutovacuum  *time.Time `json:"last_autovacuum"`
	LastAnalyze     *time.Time `json:"last_analyze"`
	LastAutoanalyze *time.Time `json:"last_autoanalyze"`
}

type horizonJSON struct {
	AgeSeconds float64     `json:"age_seconds"`
	XIDAge     *int64      `json:"xid_age"`
	Holder     *holderJSON `json:"holder"`
}

type holderJSON struct {
	Kind   outbox.HorizonKind `json:"kind"`
	PID    int64              `json:"pid"`
	Name   string             `json:"name"`
	User   string             `json:"user"`
	Client string             `json:"client"`
	State  string             `json:"state"`
}

type sqliteFileJSON struct {
	Bytes     int64  `json:"bytes"`
	FreeBytes int64  `json:"free_bytes"`
	WALBytes  *int64 `json:"wal_bytes"`
}

func healthDocument(s statsJSON, h outbox.TableHealth) statsHealthJSON {
	doc := statsHealthJSON{statsJSON: s, Tables: make([]tableJSON, len(h.Tables)), InnoDBHistoryLength: h.HistoryLength}
	for i, t := range h.Tables {
		doc.Tables[i] = tableJSON{Table: t.Table, LiveRows: t.LiveRows, DeadTuples: t.DeadTuples, Bytes: t.Bytes, FreeBytes: t.FreeBytes}
		if v := t.Vacuum; v != nil {
			doc.Tables[i].Vacuum = &vacuumJSON{LastVacuum: optionalTime(v.LastVacuum), LastAutovacuum: optionalTime(v.LastAutovacuum),
				LastAnalyze: optionalTime(v.LastAnalyze), LastAutoanalyze: optionalTime(v.LastAutoanalyze)}
		}
	}
	if hz := h.Horizon; hz != nil {
		doc.VacuumHorizon = &horizonJSON{AgeSeconds: math.Round(hz.Age.Seconds()*1000) / 1000, XIDAge: hz.XIDAge}
		if w := hz.Holder; w != nil {
			doc.VacuumHorizon.Holder = &holderJSON{Kind: w.Kind, PID: w.PID, Name: w.Name, User: w.User, Client: w.Client, State: w.State}
		}
	}
	if f := h.File; f != nil {
		doc.SQLiteFile = &sqliteFileJSON{Bytes: f.Bytes, FreeBytes: f.FreeBytes, WALBytes: f.WALBytes}
	}
	return doc
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
			tw.row("%s\t%s\n", t.Table, strings.Join(parts, ", "))
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
		b.WriteString(" user " + w.User)
	}
	if w.Client != "" {
		b.WriteString(" from " + w.Client)
	}
	if w.State != "" {
		b.WriteString(", " + w.State)
	}
	return b.String()
}
