package sinkurl

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// TLSOptions are the tls URL options TLS and SchemeTLS read.
var TLSOptions = []string{"tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name"}

// TLS builds the TLS configuration the tls options of o ask for, or nil
// when there are none: tls (true or false), tls_ca (a PEM file of CA
// certificates, read now), tls_cert and tls_key (a client certificate and
// its key, loaded now) and tls_server_name. Any tls_ option implies
// tls=true.
func TLS(o *Options) (*tls.Config, error) {
	on := o.Bool("tls")
	if o.err != nil {
		return nil, o.err
	}
	f := TLSFiles{CA: o.Get("tls_ca"), Cert: o.Get("tls_cert"), Key: o.Get("tls_key"), ServerName: o.Get("tls_server_name")}
	if o.Has("tls") && !on {
		if !f.empty() {
			return nil, OptionError("tls", errors.New("is false but other tls_ options are set: drop tls=false"))
		}
		return nil, nil
	}
	if !on && f.empty() {
		return nil, nil
	}
	return f.Load(URLOptionNames)
}

// SchemeTLS is TLS for a sink whose URL scheme says whether it speaks TLS,
// such as redis:// and rediss://; secure tells which one name (the URL,
// redacted) has. On a TLS scheme the options configure the connection
// (nil without any: the scheme's defaults) and tls=false is refused; on a
// plain scheme every option but tls=false is refused, pointing at
// tlsScheme, rather than quietly ignored or turning TLS on behind the
// scheme's back.
func SchemeTLS(o *Options, name string, secure bool, tlsScheme, plainScheme string) (*tls.Config, error) {
	on := o.Bool("tls")
	if o.err != nil {
		return nil, o.err
	}
	if secure {
		if o.Has("tls") && !on {
			return nil, OptionError("tls", fmt.Errorf("is false but %s is a TLS URL: use %s:// for a plain connection", name, plainScheme))
		}
		return TLS(o)
	}
	for _, opt := range TLSOptions {
		if opt == "tls" && !on {
			continue
		}
		if o.Has(opt) {
			return nil, OptionError(opt, fmt.Errorf("is for TLS but %s is a plain connection: use %s:// for TLS", name, tlsScheme))
		}
	}
	return nil, nil
}

// TLSFiles is a client TLS configuration as the files that hold it: what
// the tls_ URL options or a sink's command-line flags name.
type TLSFiles struct {
	// CA is a PEM file of the CA certificates to trust instead of the
	// system roots.
	CA string
	// Cert and Key are PEM files of a client certificate and its private
	// key, for servers that require one. Give both or neither.
	Cert, Key string
	// ServerName is the name the server's certificate must hold, when it
	// is not the host the URL names.
	ServerName string
}

func (f TLSFiles) empty() bool { return f == TLSFiles{} }

// TLSNames say how errors name the settings of a TLSFiles.
type TLSNames struct {
	// CA, Cert and Key name TLSFiles.CA, Cert and Key in errors.
	CA, Cert, Key string
	// Field returns the field of the *outbox.ConfigError for the setting
	// named name.
	Field func(name string) string
}

// URLOptionNames names the settings by their URL options, in errors for
// the field "URL option tls_ca" and so on.
var URLOptionNames = TLSNames{CA: "tls_ca", Cert: "tls_cert", Key: "tls_key", Field: func(name string) string { return "URL option " + name }}

// Load reads the files of f now and returns the client configuration
// they make: TLS 1.2 or later, trusting CA (or the system roots without
// it), presenting the client certificate when given, and verifying
// ServerName when given. Errors are *outbox.ConfigError values for the
// setting at fault, named as n says; they name the CA and certificate
// files, never the key file or what any file holds.
func (f TLSFiles) Load(n TLSNames) (*tls.Config, error) {
	fail := func(name, format string, args ...any) error {
		return Errorf(n.Field(name), format, args...)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		data, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fail(n.CA, "cannot read the CA file: %w: check the path and its permissions", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(data) {
			return nil, fail(n.CA, "%s holds no PEM certificate: point it at the CA's certificate (-----BEGIN CERTIFICATE-----)", f.CA)
		}
	}
	switch {
	case f.Cert != "" && f.Key == "":
		return nil, fail(n.Cert, "is set without %s: %s and %s go together; set both for a client certificate, or neither", n.Key, n.Cert, n.Key)
	case f.Key != "" && f.Cert == "":
		return nil, fail(n.Key, "is set without %s: %s and %s go together; set both for a client certificate, or neither", n.Cert, n.Cert, n.Key)
	case f.Cert == "":
		return c, nil
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fail(n.Cert, "cannot read the client certificate: %w: check the path and its permissions", err)
	}
	if !hasPEM(certPEM, func(t string) bool { return t == "CERTIFICATE" }) {
		return nil, fail(n.Cert, "%s holds no PEM certificate: point it at the client certificate (-----BEGIN CERTIFICATE-----)", f.Cert)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		// The path of a private key stays out of errors and logs: drop it
		// from the *os.PathError.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fail(n.Key, "cannot read the key file: %w: check the path and its permissions", err)
	}
	if !hasPEM(keyPEM, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") }) {
		return nil, fail(n.Key, "holds no PEM private key: point it at the key of %s (-----BEGIN PRIVATE KEY-----)", n.Cert)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// X509KeyPair names what is wrong (a key that does not match, one
		// it cannot parse) without quoting either file.
		return nil, fail(n.Key, "does not make a key pair with %s (%v): use the unencrypted key the certificate was issued for", n.Cert, err)
	}
	c.Certificates = []tls.Certificate{pair}
	return c, nil
}

// hasPEM reports whether data holds a PEM block whose type is ok.
func hasPEM(data []byte, ok func(blockType string) bool) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if ok(b.Type) {
			return true
		}
	}
}
