package cli

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckTextFlags(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{
		"order.created": "", "": "", "ordér": "",
		"a\x00b": `invalid --type "a\x00b": it holds a NUL byte or invalid UTF-8`,
		"\xff":   `invalid --type "\xff": it holds a NUL byte or invalid UTF-8`,
		"\x20\t": "invalid --type: it is blank",
	} {
		err := checkTextFlags(map[string]string{"type": v})
		switch {
		case want == "" && err != nil:
			t.Errorf("--type %q: %v", v, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("--type %q: %v, want %q", v, err, want)
		}
	}
}

func FuzzCheckTextFlags(f *testing.F) {
	for _, seed := range []string{"order.created", "order.*", "", " ", "a\x00", "\xff\xfe", "\x1b[2J", "é"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, flag := range []string{"type", "aggregate-type", "aggregate-id"} {
			err := checkTextFlags(map[string]string{flag: v})
			bad := strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) || (v != "" && strings.TrimSpace(v) == "")
			if bad != (err != nil) {
				t.Fatalf("--%s %q: error %v, want an error %t", flag, v, err, bad)
			}
			var ue *usageError
			if err != nil && (!errors.As(err, &ue) || strings.Contains(err.Error(), "\n") || !utf8.ValidString(err.Error())) {
				t.Fatalf("--%s %q: %q is not one clear usage line", flag, v, err)
			}
		}
	})
}
