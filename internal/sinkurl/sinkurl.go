// Package sinkurl holds what the broker sinks share in parsing their sink
// URLs and keeping credentials out of errors and logs: a hand-written
// parser for URLs that list several hosts (kafka://a:9092,b:9092, which
// net/url refuses), a reader for query options that keeps the first
// error, the tls options, checks for URLs net/url does parse (amqp://,
// redis://, mqtt://), and redaction.
//
// Every error is an *outbox.ConfigError that never quotes a password, and
// the words of every message are the sinks' own: a sink passes in what
// differs (its scheme, default port, hints), so moving the code here
// changed no message.
package sinkurl

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/outboxkit/outbox"
)

// Redacted stands in for a secret in a printed configuration or a
// client library's error text.
const Redacted = "[REDACTED]"

// Errorf returns an *outbox.ConfigError for field with a formatted
// message.
func Errorf(field, format string, args ...any) error {
	return &outbox.ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// URLErrorf is Errorf for the field URL.
func URLErrorf(format string, args ...any) error { return Errorf("URL", format, args...) }

// Scrub replaces every non-empty secret in text with Redacted, for text a
// client library or a remote endpoint wrote (which may quote a password or
// token back). Give the longest secrets first when one may contain
// another.
func Scrub(text string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			text = strings.ReplaceAll(text, secret, Redacted)
		}
	}
	return text
}

// ValidSource reports whether s is a usable CloudEvents source for the
// sinks that take a host list (kafkasink, natssink): not empty, no
// whitespace anywhere, and a URI reference net/url parses.
func ValidSource(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	_, err := url.Parse(s)
	return err == nil
}

// CheckSource checks the CloudEvents source the way amqpsink, redissink,
// mqttsink and webhooksink do: a URI reference net/url parses, without
// leading or trailing whitespace. It returns an *outbox.ConfigError for
// the field Source, or nil.
func CheckSource(s string) error {
	if _, err := url.Parse(s); err != nil || strings.TrimSpace(s) != s {
		return Errorf("Source", "%q is not a URI reference: use something like /outbox or urn:example:orders", s)
	}
	return nil
}
