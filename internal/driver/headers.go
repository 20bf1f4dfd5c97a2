package driver

import (
	"encoding/json"
	"fmt"
	"strings"
)

// DecodeHeaders turns a stored headers object into a string map. Writers in
// other languages may store numbers, booleans or nested values; those keep
// their JSON text so nothing a writer stored is dropped.
func DecodeHeaders(raw []byte) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "{}" {
		return nil, nil // the common case, without a decoder
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("headers are not a JSON object: %w", err)
	}
	if len(values) == 0 {
		return nil, nil
	}
	headers := make(map[string]string, len(values))
	for k, v := range values {
		var s string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
			headers[k] = s
			continue
		}
		if string(v) == "null" {
			continue
		}
		headers[k] = string(v)
	}
	return headers, nil
}

// LikePatterns turns event-type patterns, where * matches any run of
// characters, into SQL LIKE patterns with backslash as the escape
// character: %, _ and \ in a pattern match themselves.
func LikePatterns(globs []string) []string {
	out := make([]string, len(globs))
	for i, g := range globs {
		var b strings.Builder
		for _, r := range g {
			switch r {
			case '*':
				b.WriteByte('%')
			case '%', '_', '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			default:
				b.WriteRune(r)
			}
		}
		out[i] = b.String()
	}
	return out
}
