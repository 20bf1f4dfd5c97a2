package outboxadmin

import (
	"math"
	"net/http"
	"time"

	"github.com/outboxkit/outbox"
)

// HealthJSON is GET /api/health: the outbox tables' size and garbage, and
// what holds back their cleanup (outbox.TableHealth). A figure the database
// does not report is null. outbox stats --json prints the same keys.
type HealthJSON struct {
	Tables              []TableJSON     `json:"tables"`
	VacuumHorizon       *HorizonJSON    `json:"vacuum_horizon"`
	InnoDBHistoryLength *int64          `json:"innodb_history_length"`
	SQLiteFile          *SQLiteFileJSON `json:"sqlite_file"`
}

// TableJSON is one table's size and garbage.
type TableJSON struct {
	Table      string      `json:"table"`
	LiveRows   *int64      `json:"live_rows"`
	DeadTuples *int64      `json:"dead_tuples"`
	Bytes      *int64      `json:"bytes"`
	FreeBytes  *int64      `json:"free_bytes"`
	Vacuum     *VacuumJSON `json:"vacuum"`
}

// VacuumJSON says when the table was last vacuumed and analyzed; null for
// never.
type VacuumJSON struct {
	LastVacuum      *time.Time `json:"last_vacuum"`
	LastAutovacuum  *time.Time `json:"last_autovacuum"`
	LastAnalyze     *time.Time `json:"last_analyze"`
	LastAutoanalyze *time.Time `json:"last_autoanalyze"`
}

// HorizonJSON is the oldest transaction holding back the removal of dead
// rows, and who holds it (null when nothing does).
type HorizonJSON struct {
	AgeSeconds float64     `json:"age_seconds"`
	XIDAge     *int64      `json:"xid_age"`
	Holder     *HolderJSON `json:"holder"`
}

// HolderJSON is the session, prepared transaction or replication slot that
// holds the vacuum horizon.
type HolderJSON struct {
	Kind   outbox.HorizonKind `json:"kind"`
	PID    int64              `json:"pid"`
	Name   string             `json:"name"`
	User   string             `json:"user"`
	Client string             `json:"client"`
	State  string             `json:"state"`
}

// SQLiteFileJSON is the SQLite database file's size.
type SQLiteFileJSON struct {
	Bytes     int64  `json:"bytes"`
	FreeBytes int64  `json:"free_bytes"`
	WALBytes  *int64 `json:"wal_bytes"`
}

// NewHealthJSON converts h to its JSON form.
func NewHealthJSON(h outbox.TableHealth) HealthJSON {
	doc := HealthJSON{Tables: make([]TableJSON, len(h.Tables)), InnoDBHistoryLength: h.HistoryLength}
	for i, t := range h.Tables {
		doc.Tables[i] = TableJSON{Table: t.Table, LiveRows: t.LiveRows, DeadTuples: t.DeadTuples, Bytes: t.Bytes, FreeBytes: t.FreeBytes}
		if v := t.Vacuum; v != nil {
			doc.Tables[i].Vacuum = &VacuumJSON{LastVacuum: optionalTime(v.LastVacuum), LastAutovacuum: optionalTime(v.LastAutovacuum),
				LastAnalyze: optionalTime(v.LastAnalyze), LastAutoanalyze: optionalTime(v.LastAutoanalyze)}
		}
	}
	if hz := h.Horizon; hz != nil {
		doc.VacuumHorizon = &HorizonJSON{AgeSeconds: math.Round(hz.Age.Seconds()*1000) / 1000, XIDAge: hz.XIDAge}
		if w := hz.Holder; w != nil {
			doc.VacuumHorizon.Holder = &HolderJSON{Kind: w.Kind, PID: w.PID, Name: w.Name, User: w.User, Client: w.Client, State: w.State}
		}
	}
	if f := h.File; f != nil {
		doc.SQLiteFile = &SQLiteFileJSON{Bytes: f.Bytes, FreeBytes: f.FreeBytes, WALBytes: f.WALBytes}
	}
	return doc
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.dbContext(r)
	defer cancel()
	th, err := h.cfg.Manager.TableHealth(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewHealthJSON(th))
}
