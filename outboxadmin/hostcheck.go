package outboxadmin

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"
)

// AnyHost in Config.AllowedHosts turns the Host check off, for a handler
// mounted behind authentication of your own (see Principal) under a name
// of its own.
const AnyHost = "*"

// hostAllowed reports whether a request's Host header names the handler in
// a way a tokenless handler may answer: a loopback name or address (any
// port), or an entry of AllowedHosts. A web page whose domain resolves to
// 127.0.0.1 (DNS rebinding) is same-origin with the dashboard as far as the
// browser is concerned, but its requests carry its own domain as Host:
// refusing those keeps the page from reading events or acting on them.
func hostAllowed(host string, allowed []string) bool {
	if slices.Contains(allowed, AnyHost) {
		return true
	}
	name, port := splitHost(host)
	if name == "" {
		return false
	}
	if name == "localhost" {
		return true
	}
	if ip, err := netip.ParseAddr(name); err == nil && ip.Unmap().IsLoopback() {
		return true
	}
	for _, a := range allowed {
		an, ap := splitHost(a)
		if an == name && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

// splitHost splits a Host header or an AllowedHosts entry into a lower-case
// name without a trailing dot or IPv6 brackets, and a port ("" without).
func splitHost(h string) (name, port string) {
	h = strings.ToLower(strings.TrimSpace(h))
	if n, p, err := net.SplitHostPort(h); err == nil {
		h, port = n, p
	} else {
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return strings.TrimSuffix(h, "."), port
}

// checkAllowedHosts validates AllowedHosts entries.
func checkAllowedHosts(hosts []string) error {
	for _, h := range hosts {
		name, _ := splitHost(h)
		if h != AnyHost && (name == "" || strings.ContainsAny(h, "/?#@ \t") || !utf8.ValidString(h)) {
			return fmt.Errorf("entry %q is not a host name: use a name such as outbox.internal or outbox.internal:8080, an IP address, or * for any", h)
		}
	}
	return nil
}

// checkHost refuses a request whose Host a tokenless handler must not
// answer; it reports whether the request may go on.
func (h *Handler) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.AuthToken != "" || h.cfg.BasicAuth != nil || hostAllowed(r.Host, h.cfg.AllowedHosts) {
		return true
	}
	h.log.Warn("request for another host refused", slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("remote_addr", r.RemoteAddr), slog.String("host", r.Host))
	writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: without authentication the admin API answers only to "+
		"localhost, 127.0.0.1, [::1] and its allowed hosts; open it as http://127.0.0.1:<port>/, add the name to AllowedHosts "+
		"(outbox admin --allowed-hosts), or set a token", r.Host))
	return false
}
