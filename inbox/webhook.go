package inbox

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
)

// Defaults of WebhookConfig.
const (
	// ToleranceDefault is how far a webhook-timestamp may lie from the
	// receiver's clock, either way: Standard Webhooks' five minutes.
	ToleranceDefault = 5 * time.Minute
	// MaxBodyBytesDefault bounds a request body: 1 MiB.
	MaxBodyBytesDefault = 1 << 20
	// WebhookSourceDefault is Message.Source for requests that carry no
	// ce-source header.
	WebhookSourceDefault = "webhook"
)

// Standard Webhooks headers, as the webhook sink sends them.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

const secretPrefix = "whsec_"

// WebhookConfig configures a WebhookHandler.
type WebhookConfig struct {
	// Receive stores one message and returns once it is committed; the
	// handler answers 2xx only after it returned without an error. Use
	// an Inbox: Store on a pool keeps the message for SQL consumers, and
	// a closure over Handle applies a Go handler's effect in the same
	// transaction. Required.
	Receive func(ctx context.Context, msg Message) (Result, error)
	// ReceiveBatch, when set, stores the messages of a request that
	// carries several (a CloudEvents batch) with one call, all or none,
	// returning one Result per message in order: an Inbox's StoreBatch on
	// a pool stores them in one round trip. Without it each message goes
	// through Receive on its own.
	ReceiveBatch func(ctx context.Context, msgs []Message) ([]Result, error)
	// Secret, when set, makes every request carry a valid Standard
	// Webhooks signature (webhook-id, webhook-timestamp,
	// webhook-signature), as the webhook sink signs with the same
	// secret: whsec_<base64> is decoded, any other string is the key
	// byte for byte. Without it any request is accepted: set it whenever
	// the endpoint is reachable by others.
	Secret string
	// Tolerance is how far webhook-timestamp may lie from now, either
	// way: an older request is refused as a replay. Defaults to
	// ToleranceDefault.
	Tolerance time.Duration
	// MaxBodyBytes bounds a request's body; a larger one gets 413.
	// Defaults to MaxBodyBytesDefault.
	MaxBodyBytes int64
	// Source is Message.Source for requests without a ce-source header.
	// Defaults to WebhookSourceDefault.
	Source string
	// Logger receives a warning for each request refused or failed.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// now is the clock, for tests.
	now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c WebhookConfig) WithDefaults() WebhookConfig {
	c.Tolerance = cmp.Or(c.Tolerance, ToleranceDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.Source = cmp.Or(c.Source, WebhookSourceDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With(slog.String("component", "inbox"))
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// WebhookHandler is an http.Handler that receives the webhook sink's
// requests (CloudEvents binary mode, Standard Webhooks signatures) into an
// inbox. On any path it answers:
//
//	200  the message was stored, or was stored before (a duplicate); its
//	     body is {"status":"stored"} or {"status":"duplicate"}
//	400  no webhook-id or ce-id header, or a body that is not JSON
//	401  with a secret: a missing, malformed or wrong signature, or a
//	     timestamp outside the tolerance (a replay)
//	405  a method other than POST
//	413  a body over MaxBodyBytes
//	503  Receive failed (the database is down): nothing was stored and
//	     the sender retries
//
// The webhook sink treats 5xx as retryable and other 4xx as permanent.
type WebhookHandler struct {
	cfg WebhookConfig
	key []byte // nil without a secret
}

// NewWebhookHandler returns the handler for cfg, or an
// *outbox.ConfigError naming the field that is invalid.
func NewWebhookHandler(cfg WebhookConfig) (*WebhookHandler, error) {
	cfg = cfg.WithDefaults()
	if cfg.Receive == nil {
		return nil, configError("Receive", errors.New("is nil: pass the function that stores a message, such as an Inbox's Store"))
	}
	if cfg.Tolerance < 0 {
		return nil, configError("Tolerance", errors.New("is negative"))
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, configError("MaxBodyBytes", errors.New("is negative"))
	}
	key, err := SecretKey(cfg.Secret)
	if err != nil {
		return nil, configError("Secret", err)
	}
	return &WebhookHandler{cfg: cfg, key: key}, nil
}

// SecretKey returns the HMAC key of a Standard Webhooks secret as the
// webhook sink uses it: the base64-decoded rest of a whsec_ secret, any
// other string byte for byte, nil for none. Its errors never quote the
// secret.
func SecretKey(secret string) ([]byte, error) {
	switch {
	case secret == "":
		return nil, nil
	case secret == secretPrefix:
		return nil, errors.New("is whsec_ with no key after it: paste the whole secret")
	case strings.HasPrefix(secret, secretPrefix):
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
		if err != nil {
			return nil, errors.New("starts with whsec_ but the rest is not valid standard base64: " +
				"paste the secret exactly as generated, or drop the whsec_ prefix to use the string itself as the key")
		}
		return key, nil
	}
	return []byte(secret), nil
}

// ServeHTTP receives one message.
func (h *WebhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, r, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed: POST the message")
		return
	}
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is over the limit of %d", r.ContentLength, h.cfg.MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over the limit of %d bytes", h.cfg.MaxBodyBytes))
			return
		}
		h.refuse(w, r, http.StatusBadRequest, "cannot read the body: "+err.Error())
		return
	}
	if h.key != nil {
		if err := h.verify(r.Header, body); err != nil {
			h.refuse(w, r, http.StatusUnauthorized, err.Error())
			return
		}
	}
	msgs, err := h.messages(r.Header, body)
	if err != nil {
		h.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	duplicates, err := h.store(r.Context(), msgs)
	if err != nil {
		h.cfg.Logger.Warn("webhook message not stored; the sender will retry", "message_id", msgs[0].ID, "messages", len(msgs), "error", err.Error())
		writeStatus(w, http.StatusServiceUnavailable, "error", "not stored, retry later")
		return
	}
	if duplicates == len(msgs) {
		writeStatus(w, http.StatusOK, "duplicate", "")
		return
	}
	writeStatus(w, http.StatusOK, "stored", "")
}

// store stores msgs and counts the duplicates among them. A batch goes to
// ReceiveBatch when set, all or none; otherwise its messages are stored
// one by one, each keyed on its own id: when one fails the request gets
// 503, and the sender's retry (batched the same way or not) finds the
// stored ones as duplicates.
func (h *WebhookHandler) store(ctx context.Context, msgs []Message) (duplicates int, err error) {
	if len(msgs) > 1 && h.cfg.ReceiveBatch != nil {
		results, err := h.cfg.ReceiveBatch(ctx, msgs)
		if err != nil {
			return 0, err
		}
		if len(results) != len(msgs) {
			return 0, fmt.Errorf("inbox: ReceiveBatch returned %d results for %d messages", len(results), len(msgs))
		}
		for _, res := range results {
			if res.Duplicate {
				duplicates++
			}
		}
		return duplicates, nil
	}
	for _, msg := range msgs {
		res, err := h.cfg.Receive(ctx, msg)
		if err != nil {
			return 0, fmt.Errorf("message %s: %w", msg.ID, err)
		}
		if res.Duplicate {
			duplicates++
		}
	}
	return duplicates, nil
}

// messages reads the request's messages: the events of a CloudEvents batch
// or a structured-mode event, each keyed on its own id and source, else the
// one message of a binary-mode request.
func (h *WebhookHandler) messages(hdr http.Header, body []byte) ([]Message, error) {
	mt, _, _ := mime.ParseMediaType(hdr.Get("Content-Type"))
	switch mt {
	case "application/cloudevents-batch+json":
		msgs, err := StructuredBatch(body, h.cfg.Source)
		if err == nil && len(msgs) == 0 {
			err = errors.New("the CloudEvents batch is empty")
		}
		return msgs, err
	case "application/cloudevents+json":
		msg, err := StructuredMessage(body, h.cfg.Source)
		return []Message{msg}, err
	}
	msg, err := h.message(hdr, body, mt)
	return []Message{msg}, err
}

// verify checks the Standard Webhooks signature and timestamp.
func (h *WebhookHandler) verify(hdr http.Header, body []byte) error {
	id, ts, sigs := hdr.Get(HeaderWebhookID), hdr.Get(HeaderWebhookTimestamp), hdr.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing signature: the request needs webhook-id, webhook-timestamp and webhook-signature headers (is the sender configured with the secret?)")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("invalid webhook-timestamp: want Unix seconds")
	}
	if d := h.cfg.now().Sub(time.Unix(sec, 0)); d > h.cfg.Tolerance || d < -h.cfg.Tolerance {
		return fmt.Errorf("webhook-timestamp is %s away from now, more than the tolerance of %s: a replayed or delayed request, or a clock off", d.Round(time.Second).Abs(), h.cfg.Tolerance)
	}
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for sig := range strings.FieldsSeq(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("invalid webhook-signature: no v1 signature matches the body with this secret")
}

// message reads the message from the request's headers and body; mt is
// the media type of its Content-Type, "" for none or one that does not
// parse.
func (h *WebhookHandler) message(hdr http.Header, body []byte, mt string) (Message, error) {
	msg := Message{Headers: map[string]string{}, Payload: body}
	for name, values := range hdr {
		lower := strings.ToLower(name)
		attr, ok := strings.CutPrefix(lower, "ce-")
		if !ok || attr == "" || len(values) == 0 {
			continue
		}
		v := values[0]
		if dec, err := url.PathUnescape(v); err == nil {
			v = dec // the CloudEvents HTTP binding percent-encodes values
		}
		msg.Headers[attr] = v
	}
	for _, name := range []string{"traceparent", "tracestate"} {
		if v := hdr.Get(name); v != "" {
			msg.Headers[name] = v
		}
	}
	msg.ID = cmp.Or(hdr.Get(HeaderWebhookID), msg.Headers["id"])
	if msg.ID == "" {
		return Message{}, errors.New("missing message id: send a webhook-id or ce-id header")
	}
	msg.Source = cmp.Or(msg.Headers["source"], h.cfg.Source)
	msg.EventType = msg.Headers["type"]
	if t, err := time.Parse(time.RFC3339Nano, msg.Headers["time"]); err == nil {
		msg.Time = t
	}
	if len(body) == 0 {
		msg.Payload = nil
	} else if mt != "" && mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return Message{}, fmt.Errorf("content type %s is not JSON: the inbox stores JSON payloads", mt)
	}
	if err := CheckMessage(msg); err != nil {
		return Message{}, err
	}
	return msg, nil
}

func (h *WebhookHandler) refuse(w http.ResponseWriter, r *http.Request, code int, reason string) {
	h.cfg.Logger.Warn("webhook request refused", "status", code, "reason", reason, "remote_addr", r.RemoteAddr)
	writeStatus(w, code, "refused", reason)
}

// The bodies of the two answers every message gets, encoded once.
var (
	bodyStored    = statusBody("stored", "")
	bodyDuplicate = statusBody("duplicate", "")
)

func statusBody(status, reason string) []byte {
	b, _ := json.Marshal(struct {
		Status string `json:"status"`
		Reason string `json:"reason,omitempty"`
	}{status, reason})
	return append(b, '\n')
}

func writeStatus(w http.ResponseWriter, code int, status, reason string) {
	body := bodyStored
	switch {
	case status == "duplicate" && reason == "":
		body = bodyDuplicate
	case status != "stored" || reason != "":
		body = statusBody(status, reason)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func configError(field string, err error) error { return &outbox.ConfigError{Field: field, Err: err} }
