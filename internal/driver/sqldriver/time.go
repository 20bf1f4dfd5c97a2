package sqldriver

import (
	"fmt"
	"time"
)

// Time scans a timestamp column, which the outbox stores in UTC: a
// time.Time from a driver that parses timestamps (its wall clock is taken
// as UTC, whatever location the driver gave it, since the column has none),
// or the text form (MySQL without parseTime, SQLite). NULL is the zero
// time.
type Time struct{ time.Time }

// timeLayouts are the text forms Time accepts, the stored form first.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
}

// Scan implements sql.Scanner.
func (t *Time) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		t.Time = time.Time{}
		return nil
	case time.Time:
		y, mo, d := v.Date()
		h, mi, s := v.Clock()
		t.Time = time.Date(y, mo, d, h, mi, s, v.Nanosecond(), time.UTC)
		return nil
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	}
	return fmt.Errorf("cannot scan %T into a timestamp", src)
}

func (t *Time) parse(s string) error {
	for _, layout := range timeLayouts {
		if p, err := time.Parse(layout, s); err == nil {
			t.Time = p.UTC()
			return nil
		}
	}
	return fmt.Errorf("cannot parse timestamp %q", s)
}
