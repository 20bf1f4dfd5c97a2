package cli

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestRedactDatabaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://bob:secret@host:5432/db", "postgres://bob:xxxxx@host:5432/db"},
		{"postgresql://bob:se@cret@host/db", "postgresql://bob:xxxxx@host/db"},
		{"postgres://bob@host:5432/db", "postgres://bob@host:5432/db"},
		{"postgres://host:5432/db?password=secret&sslmode=disable", "postgres://host:5432/db?password=xxxxx&sslmode=disable"},
		{"postgres://host/db?SSLPassword=secret", "postgres://host/db?SSLPassword=xxxxx"},
		{"postgres://host/db?pass%77ord=secret", "postgres://host/db?pass%77ord=xxxxx"},
		{"mysql://bob:secret@host/db", "mysql://bob:xxxxx@host/db"},
		{"bob:secret@host/db", "bob:xxxxx@host/db"},
		{"host=h password=secret port=5432", "host=h password=xxxxx port=5432"},
		{"host=h password = 'sec ret' port=5432", "host=h password = xxxxx port=5432"},
		{"host=h sslpassword=secret", "host=h sslpassword=xxxxx"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, redactDatabaseURL(tt.in), tt.in)
	}
}

func TestRedactorMasksEveryForm(t *testing.T) {
	t.Parallel()
	r := &redactor{}
	r.addDatabaseURL("postgres://bob:p%40ss%2Fw0rd@host/db")
	for _, s := range []string{"p@ss/w0rd", "p%40ss%2Fw0rd"} {
		require.Equal(t, "a xxxxx b", r.String("a "+s+" b"))
	}
	r.add("")
	require.Equal(t, "nothing to hide", r.String("nothing to hide"))
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "failed to connect to `user=u`: a: refused; b: refused",
		oneLine("failed to connect to `user=u`:\n\ta: refused\n\tb: refused\n"))
	require.Equal(t, "plain", oneLine("plain"))
}

// FuzzRedactor checks that whatever password a URL carries, neither the
// redactor nor the message for an unparsable URL lets it through.
func FuzzRedactor(f *testing.F) {
	f.Add("bob", "secret", "127.0.0.1:5432")
	f.Add("bob", "se@cret", "host:port")
	f.Add("bob", "p:a/s?s", "h")
	f.Add("", "only-password", "h,h2:5433")
	f.Add("a", "sec ret", "bad host")
	f.Fuzz(func(t *testing.T, user, password, host string) {
		if len(password) < 4 || strings.Contains(redactMask, password) {
			return // too short to tell apart from the rest of a message
		}
		raw := "postgres://" + user + ":" + password + "@" + host + "/db"
		if strings.Contains("postgres://"+user+":@"+host+"/db", password) {
			return // the password is also a user name or host
		}
		r := &redactor{}
		r.addDatabaseURL(raw)
		if cfg, err := pgconn.ParseConfig(raw); err == nil {
			r.add(cfg.Password)
			if cfg.Password != "" && strings.Contains(r.String("x"+cfg.Password+"x"), cfg.Password) {
				t.Fatalf("password %q of %q not masked", cfg.Password, raw)
			}
			return
		} else if msg := r.String(parseErrorMessage(raw, err)); strings.Contains(msg, password) {
			t.Fatalf("message for %q leaks the password: %s", raw, msg)
		}
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && len(pw) >= 4 && strings.Contains(r.String(pw), pw) {
				t.Fatalf("password %q of %q not masked", pw, raw)
			}
		}
	})
}
