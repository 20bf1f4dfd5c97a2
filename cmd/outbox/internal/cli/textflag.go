package cli

import (
	"strings"
	"unicode/utf8"
)

// checkTextFlags refuses filter flags (--type, --aggregate-type,
// --aggregate-id) whose value the database cannot compare with: a NUL
// byte or invalid UTF-8 would fail the query with a database error, and a
// blank value matches nothing. values maps a flag's name to its value;
// empty values are unset flags.
func checkTextFlags(values map[string]string) error {
	for _, name := range []string{"type", "aggregate-type", "aggregate-id"} {
		v := values[name]
		switch {
		case v == "":
		case strings.TrimSpace(v) == "":
			return usagef("invalid --%s: it is blank: name a value, or remove the flag", name)
		case strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v):
			return usagef("invalid --%s %q: it holds a NUL byte or invalid UTF-8, which no stored value has", name, v)
		}
	}
	return nil
}
