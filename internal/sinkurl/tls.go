package sinkurl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

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
	ca, cert, key, serverName := o.Get("tls_ca"), o.Get("tls_cert"), o.Get("tls_key"), o.Get("tls_server_name")
	if o.Has("tls") && !on {
		if ca != "" || cert != "" || key != "" || serverName != "" {
			return nil, OptionError("tls", errors.New("is false but other tls_ options are set: drop tls=false"))
		}
		return nil, nil
	}
	if !on && ca == "" && cert == "" && key == "" && serverName == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, OptionError("tls_ca", fmt.Errorf("cannot read the CA file: %w", err))
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, OptionError("tls_ca", fmt.Errorf("%s holds no PEM certificate: point it at the CA's certificate", ca))
		}
	}
	if (cert == "") != (key == "") {
		return nil, OptionError("tls_cert", errors.New("and tls_key go together: set both for a client certificate, or neither"))
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, OptionError("tls_cert", fmt.Errorf("cannot load the client certificate and key: %w", err))
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
