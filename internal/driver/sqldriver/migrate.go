package sqldriver

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Migration is one embedded schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string // with {{schema}} placeholders
}

// LoadMigrations reads NNN_name.sql files from dir of fsys, in version
// order. The files are embedded at build time, so an error is a bug.
func LoadMigrations(fsys fs.FS, dir string) []Migration {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic(err)
	}
	var ms []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("migration file name must be NNN_name.sql: " + e.Name())
		}
		body, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: version, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

// Statements splits a migration into its statements: each ends with the
// delimiter, a semicolon unless a DELIMITER line (the mysql client's
// command) set another, at the end of a line. Drivers without
// multi-statement support (go-sql-driver/mysql by default) run them one by
// one. A statement ended by another delimiter (a trigger whose body holds
// semicolons) is returned without it; DELIMITER lines are dropped, so the
// same script runs here and in the mysql client.
func Statements(script string) []string {
	var (
		out   []string
		cur   strings.Builder
		delim = ";"
	)
	for line := range strings.SplitAfterSeq(script, "\n") {
		t := strings.TrimSpace(line)
		if f := strings.Fields(t); len(f) == 2 && strings.EqualFold(f[0], "DELIMITER") {
			delim = f[1]
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, delim) && !strings.HasPrefix(t, "--") {
			s := strings.TrimSpace(cur.String())
			if delim != ";" {
				s = strings.TrimSpace(strings.TrimSuffix(s, delim))
			}
			if s != "" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" && !onlyComments(s) {
		out = append(out, s)
	}
	return out
}

func onlyComments(s string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			return false
		}
	}
	return true
}

// ApplyMissing applies the migrations that versions (the quoted versions
// table) lacks, on q, each followed by its row in versions. The caller holds
// the dialect's migration lock.
func ApplyMissing(ctx context.Context, q Querier, ms []Migration, versions string, render func(string) string) ([]Migration, error) {
	have, err := queryIDs(ctx, q, `SELECT version FROM `+versions)
	if err != nil {
		return nil, err
	}
	done := map[int64]bool{}
	for _, v := range have {
		done[v] = true
	}
	var applied []Migration
	for _, m := range ms {
		if done[int64(m.Version)] {
			continue
		}
		for _, stmt := range Statements(render(m.SQL)) {
			if _, err := q.ExecContext(ctx, stmt); err != nil {
				return applied, fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
			}
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO `+versions+` (version, name) VALUES (?, ?)`, m.Version, m.Name); err != nil {
			return applied, err
		}
		applied = append(applied, m)
	}
	return applied, nil
}

// MaxVersion returns the highest version in versions, 0 when empty.
func MaxVersion(ctx context.Context, q Querier, versions string) (int, error) {
	var v sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT max(version) FROM `+versions).Scan(&v)
	return int(v.Int64), err
}
