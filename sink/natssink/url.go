package natssink

import (
	"fmt"
	"os"
	"strings"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sinkurl"
)

// Scheme is the sink URL scheme this package serves.
const Scheme = "nats"

// Options are the query parameters a sink URL may carry; see the package
// documentation for what each does.
var Options = []string{
	"tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name",
	"creds", "stream", "create_stream", "stream_subjects", "duplicate_window",
	"route", "source", "name", "connect_timeout", "ack_timeout", "reconnect_wait", "max_pending",
}

// ConfigFromURL parses a sink URL of the form
//
//	nats://[user:pass@ | token@]host[:port][,host[:port]…][?option=value&…]
//
// into a Config (see the package documentation for the options). Files the
// options name (CA, client certificate, credentials) are read or checked
// now. Errors are *outbox.ConfigError values that never quote the password
// or token.
func ConfigFromURL(rawURL string) (Config, error) {
	var cfg Config
	p, err := sinkurl.SplitHostList(rawURL, urlForm)
	if err != nil {
		return cfg, &outbox.ConfigError{Field: "URL", Err: err}
	}
	for _, h := range p.Hosts {
		cfg.Servers = append(cfg.Servers, "nats://"+h)
	}
	if p.HasUser {
		if p.HasPassword {
			cfg.User, cfg.Password = p.User, p.Password
		} else {
			cfg.Token = p.User // nats://TOKEN@host, as nats-server documents
		}
	}
	o := sinkurl.NewOptions(p.Query)
	cfg.TLS, err = sinkurl.TLS(o)
	if err != nil {
		return Config{}, err
	}
	cfg.CredsFile = o.Get("creds")
	if cfg.CredsFile != "" {
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return Config{}, sinkurl.OptionError("creds", fmt.Errorf("cannot read the credentials file: %w", err))
		}
	}
	cfg.Stream = o.Get("stream")
	cfg.CreateStream = o.Bool("create_stream")
	if v := o.Get("stream_subjects"); v != "" {
		cfg.StreamSubjects = strings.Split(v, ",")
	}
	cfg.DuplicateWindow = o.Duration("duplicate_window")
	if cfg.Router, err = o.Route("route"); err != nil {
		return Config{}, err
	}
	cfg.Source = o.Get("source")
	cfg.Name = o.Get("name")
	cfg.ConnectTimeout = o.Duration("connect_timeout")
	cfg.AckTimeout = o.Duration("ack_timeout")
	cfg.ReconnectWait = o.Duration("reconnect_wait")
	cfg.MaxPending = o.Int("max_pending")
	if err := o.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// urlForm is the form of a nats:// URL.
var urlForm = sinkurl.HostListForm{
	Scheme: Scheme, DefaultPort: "4222", Hosts: "NATS URLs name servers only",
	Credentials: "a user name or token", Options: Options,
}
