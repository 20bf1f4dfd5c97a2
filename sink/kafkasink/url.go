package kafkasink

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sinkurl"
)

// Scheme is the sink URL scheme this package serves.
const Scheme = "kafka"

// Options are the query parameters a sink URL may carry; see the package
// documentation for what each does.
var Options = []string{
	"tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "sasl",
	"route", "source", "client_id", "auto_create_topics", "max_record_bytes", "compression",
	"linger", "connect_timeout", "delivery_timeout",
}

// ConfigFromURL parses a sink URL of the form
//
//	kafka://[user:pass@]host[:port][,host[:port]…][?option=value&…]
//
// into a Config (see the package documentation for the options). Files the
// TLS options name are read now. Errors are *outbox.ConfigError values that
// never quote the password.
func ConfigFromURL(rawURL string) (Config, error) {
	var cfg Config
	p, err := sinkurl.SplitHostList(rawURL, urlForm)
	if err != nil {
		return cfg, &outbox.ConfigError{Field: "URL", Err: err}
	}
	cfg.Brokers = p.Hosts
	if p.HasUser {
		if !p.HasPassword {
			return Config{}, &outbox.ConfigError{Field: "URL", Err: errors.New("has a user name without a password: write user:password@")}
		}
		cfg.User, cfg.Password = p.User, p.Password
	}
	o := sinkurl.NewOptions(p.Query)
	cfg.TLS, err = sinkurl.TLS(o)
	if err != nil {
		return Config{}, err
	}
	cfg.SASL = strings.ToLower(o.Get("sasl"))
	switch {
	case cfg.SASL != "" && !slices.Contains(saslMechanisms, cfg.SASL):
		return Config{}, sinkurl.OptionError("sasl", fmt.Errorf("is %q: use one of %s", cfg.SASL, strings.Join(saslMechanisms, ", ")))
	case cfg.User != "" && cfg.SASL == "":
		return Config{}, sinkurl.OptionError("sasl", fmt.Errorf("is missing: credentials in the URL need ?sasl= with one of %s", strings.Join(saslMechanisms, ", ")))
	case cfg.SASL != "" && cfg.User == "":
		return Config{}, sinkurl.OptionError("sasl", errors.New("is set but the URL has no user:password@"))
	}
	if cfg.Router, err = o.Route("route"); err != nil {
		return Config{}, err
	}
	cfg.Source = o.Get("source")
	cfg.ClientID = o.Get("client_id")
	cfg.AutoCreateTopics = o.Bool("auto_create_topics")
	cfg.MaxRecordBytes = o.Int("max_record_bytes")
	cfg.Compression = strings.ToLower(o.Get("compression"))
	if cfg.Compression != "" && !slices.Contains(compressions, cfg.Compression) {
		o.Fail("compression", fmt.Errorf("is %q: use one of %s", cfg.Compression, strings.Join(compressions, ", ")))
	}
	cfg.Linger = linger(o)
	cfg.ConnectTimeout = o.Duration("connect_timeout")
	cfg.DeliveryTimeout = o.Duration("delivery_timeout")
	if err := o.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// linger reads the linger option, a duration from 0 (NoLinger) to
// LingerMax; a missing option is 0, the default.
func linger(o *sinkurl.Options) time.Duration {
	v := o.Get("linger")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > LingerMax {
		o.Fail("linger", fmt.Errorf("is %q: use a duration from 0 (send at once) to %v, such as 5ms (default %v)", v, LingerMax, LingerDefault))
		return 0
	}
	if d == 0 {
		return NoLinger
	}
	return d
}

// urlForm is the form of a kafka:// URL.
var urlForm = sinkurl.HostListForm{
	Scheme: Scheme, DefaultPort: "9092", Hosts: "Kafka URLs name brokers only",
	Credentials: "a user name", Options: Options,
}
