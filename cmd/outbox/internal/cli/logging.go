package cli

import (
	"fmt"
	"io"
	"log/slog"
)

// newLogger returns the slog logger the --log-format and --log-level flags
// ask for, writing to w with every registered secret masked.
func newLogger(w io.Writer, format, level string, r *redactor) (*slog.Logger, error) {
	var lvl slog.Level
	switch level {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return nil, usagef("invalid --log-level %q: use one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: redactAttr(r)}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usagef("invalid --log-format %q: use text or json", format)
	}
}

// redactAttr masks secrets in every string, error and message a log record
// carries, and writes durations as Go duration strings ("30s") in both
// formats: slog's JSON handler would print nanoseconds.
func redactAttr(r *redactor) func([]string, slog.Attr) slog.Attr {
	return func(_ []string, a slog.Attr) slog.Attr {
		switch a.Value.Kind() {
		case slog.KindDuration:
			a.Value = slog.StringValue(a.Value.Duration().String())
		case slog.KindString:
			if s := a.Value.String(); r.String(s) != s {
				a.Value = slog.StringValue(r.String(s))
			}
		case slog.KindAny:
			// Errors and other values keep their type unless they carry
			// a secret.
			if s := fmt.Sprint(a.Value.Any()); r.String(s) != s {
				a.Value = slog.StringValue(r.String(s))
			}
		}
		return a
	}
}
