package envelope

// PercentEncode encodes an attribute value for a header as the CloudEvents
// HTTP and NATS bindings require (HTTP 1.0.2 and NATS, section 3.1.3.2
// each): space, double quote, percent and every byte outside printable
// ASCII (which covers the UTF-8 bytes of every non-ASCII character) become
// %XX. A value that needs no encoding, the common case, is returned as is
// without allocating.
func PercentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if mustEncode(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEncode(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustEncode(c byte) bool { return c <= ' ' || c == '"' || c == '%' || c >= 0x7f }

// ValidHeaderValue reports whether s can travel as an HTTP or NATS header
// value as it is: no control characters other than tab. Sinks drop a trace
// context header that fails it rather than fail the event.
func ValidHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
