package sinkurl

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/route"
)

// Options reads typed query options, keeping the first error, so a
// ConfigFromURL reads every option in a row and checks Err once.
type Options struct {
	q   url.Values
	err error
}

// NewOptions reads q.
func NewOptions(q url.Values) *Options { return &Options{q: q} }

// OptionError is the *outbox.ConfigError for the option name, whose field
// reads "URL option name".
func OptionError(name string, err error) error {
	return &outbox.ConfigError{Field: "URL option " + name, Err: err}
}

// Err returns the first error, or nil.
func (o *Options) Err() error { return o.err }

// Fail records err for the option name unless an error came first.
func (o *Options) Fail(name string, err error) {
	if o.err == nil {
		o.err = OptionError(name, err)
	}
}

// Has reports whether the option name was given, even without a value.
func (o *Options) Has(name string) bool { return o.q.Has(name) }

// Get returns the option name, or "" when it is missing. An option given
// without a value (?stream= or ?stream) is an error: it would otherwise
// silently mean the default.
func (o *Options) Get(name string) string { return o.value(name) }

// value is the option name's value; an option given empty fails.
func (o *Options) value(name string) string {
	v := o.q.Get(name)
	if v == "" && o.q.Has(name) {
		o.Fail(name, fmt.Errorf("has no value: give one (?%s=…) or leave the option out for the default", name))
	}
	return v
}

// Bool reads a true or false option; the name alone (?create_stream) means
// true.
func (o *Options) Bool(name string) bool {
	v := o.q.Get(name)
	if v == "" {
		return o.q.Has(name)
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		o.Fail(name, fmt.Errorf("is %q: use true or false", v))
	}
	return b
}

// Duration reads a positive duration such as 5s; a missing option is 0.
func (o *Options) Duration(name string) time.Duration {
	v := o.value(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		o.Fail(name, fmt.Errorf("is %q: use a positive duration such as 500ms or 5s", v))
	}
	return d
}

// Int reads a positive whole number; a missing option is 0.
func (o *Options) Int(name string) int {
	v := o.value(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		o.Fail(name, fmt.Errorf("is %q: use a positive whole number", v))
	}
	return n
}

// Route reads the option name as a route template; a missing option is a
// nil router.
func (o *Options) Route(name string) (*route.Router, error) {
	v := o.value(name)
	if err := o.Err(); err != nil {
		return nil, err
	}
	if v == "" {
		return nil, nil
	}
	r, err := route.New(v)
	if err != nil {
		return nil, OptionError(name, err)
	}
	return r, nil
}
