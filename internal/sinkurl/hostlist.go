package sinkurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// HostListForm describes a sink URL of the form
//
//	scheme://[user[:pass]@]host[:port][,host[:port]…][?option=value&…]
type HostListForm struct {
	// Scheme is the URL scheme, matched without regard to case.
	Scheme string
	// DefaultPort is the port of a host given without one.
	DefaultPort string
	// Hosts says in an error what the hosts are, as in "has a path:
	// Kafka URLs name brokers only".
	Hosts string
	// Credentials says in an error what may come before the @, such as
	// "a user name" or "a user name or token".
	Credentials string
	// Options are the query options the URL may carry.
	Options []string
}

// HostList is a host-list sink URL taken apart.
type HostList struct {
	// User and Password are the userinfo, percent-decoded. HasUser
	// reports a user name before the @; HasPassword a colon after it.
	User, Password       string
	HasUser, HasPassword bool
	// Hosts are host:port, with the form's default port where none was
	// given.
	Hosts []string
	// Query holds the options, each a known one given once.
	Query url.Values
}

// SplitHostList takes raw apart by hand, since net/url refuses a comma
// separated host list. Its errors never quote the userinfo; they are plain
// errors the caller wraps in an *outbox.ConfigError for the field URL.
func SplitHostList(raw string, form HostListForm) (HostList, error) {
	var p HostList
	use := form.Scheme + "://host:port"
	i := strings.Index(raw, "://")
	if i < 0 {
		return p, errors.New("is not a URL: use " + use)
	}
	if scheme := raw[:i]; !strings.EqualFold(scheme, form.Scheme) {
		return p, fmt.Errorf("has scheme %q: use %s", scheme, use)
	}
	rest := raw[i+3:]
	if strings.ContainsRune(rest, '#') {
		return p, errors.New("has a #fragment: remove it")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if path != "" {
		return p, fmt.Errorf("has a path: %s; put options in the query string", form.Hosts)
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo := authority[:at]
		authority = authority[at+1:]
		user, password, hasPassword := strings.Cut(userinfo, ":")
		var err error
		if p.User, err = url.PathUnescape(user); err != nil {
			return p, errors.New("has a badly percent-encoded user name")
		}
		if p.Password, err = url.PathUnescape(password); err != nil {
			return p, errors.New("has a badly percent-encoded password")
		}
		p.HasUser, p.HasPassword = p.User != "", hasPassword
		if !p.HasUser {
			return p, fmt.Errorf("has credentials without %s before the @", form.Credentials)
		}
	}
	if authority == "" {
		return p, errors.New("has no host: use " + use)
	}
	for _, h := range strings.Split(authority, ",") {
		hp, err := HostPort(h, form.DefaultPort)
		if err != nil {
			return p, err
		}
		p.Hosts = append(p.Hosts, hp)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, errors.New("has a query string that does not parse: use ?option=value&option=value with values percent-encoded")
	}
	for name, values := range q {
		if !slices.Contains(form.Options, name) {
			return p, fmt.Errorf("has unknown option %q: use one of %s", name, strings.Join(form.Options, ", "))
		}
		if len(values) > 1 {
			return p, fmt.Errorf("has option %q %d times: give it once", name, len(values))
		}
	}
	p.Query = q
	return p, nil
}

// HostPort checks host[:port], where an IPv6 address is in brackets, and
// returns it as host:port with defaultPort where none was given. Its
// errors read after "URL" or "entry 2", as in "has host … that is not
// host:port".
func HostPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", errors.New("has an empty entry in its host list: separate hosts with single commas")
	}
	host, port := h, defaultPort
	switch {
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
		host = h[1 : len(h)-1] // [::1] without a port
	case strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1:
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			return "", fmt.Errorf("has host %q that is not host:port", h)
		}
	case strings.Contains(h, ":"):
		return "", fmt.Errorf("has host %q: write an IPv6 address in brackets, such as [::1]:%s", h, defaultPort)
	}
	n, err := strconv.Atoi(port)
	switch {
	case host == "":
		return "", fmt.Errorf("has host %q without a host name", h)
	case strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("/\\[]@%,?#", r) }):
		return "", fmt.Errorf("has host %q that is not a host name or address", h)
	case err != nil || n < 1 || n > 65535:
		return "", fmt.Errorf("has host %q whose port is not a number from 1 to 65535", h)
	}
	return net.JoinHostPort(host, port), nil
}
