package cli

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// parseDuration parses a Go duration ("36h", "90m", "1h30m") that may also
// use a d suffix for days of 24 hours ("7d", "1.5d", "1d12h").
func parseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, errors.New("empty duration")
	}
	var b strings.Builder
	sign := ""
	if in[0] == '-' || in[0] == '+' {
		sign, in = in[:1], in[1:]
	}
	b.WriteString(sign)
	// Rewrite each <number>d term as hours; the other terms pass through to
	// time.ParseDuration unchanged.
	for in != "" {
		i := 0
		for i < len(in) && (in[i] == '.' || ('0' <= in[i] && in[i] <= '9')) {
			i++
		}
		num := in[:i]
		j := i
		for j < len(in) && in[j] != '.' && (in[j] < '0' || in[j] > '9') {
			j++
		}
		unit := in[i:j]
		in = in[j:]
		if unit != "d" {
			b.WriteString(num + unit)
			continue
		}
		days, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, errors.New("invalid number of days " + strconv.Quote(num+unit))
		}
		b.WriteString(strconv.FormatFloat(days*24, 'f', -1, 64) + "h")
	}
	d, err := time.ParseDuration(b.String())
	if err != nil {
		// time.ParseDuration quotes our rewritten string; name the input.
		return 0, errors.New("not a duration")
	}
	return d, nil
}
