package inbox

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"time"
)

// StructuredMessage reads a message from one CloudEvents JSON event
// (structured mode, as mqttsink publishes and the webhook sink's batched
// mode sends in an array). The key is the event's id and source members
// (source when it has none); its other string members become Headers, type
// the event type, time the event time and data the payload.
func StructuredMessage(event []byte, source string) (Message, error) {
	var members map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(event)).Decode(&members); err != nil || members == nil {
		return Message{}, &MessageError{Field: "Payload", Err: errors.New("is not a CloudEvents JSON event")}
	}
	m := Message{Headers: make(map[string]string, len(members))}
	for k, raw := range members {
		switch k {
		case "data":
			m.Payload = raw
		case "data_base64":
			return Message{}, &MessageError{Field: "Payload", Err: errors.New("is not JSON (data_base64): the inbox stores JSON payloads")}
		default:
			var s string
			if json.Unmarshal(raw, &s) == nil {
				m.Headers[k] = s
			}
		}
	}
	m.ID = m.Headers["id"]
	m.Source = cmp.Or(m.Headers["source"], source)
	m.EventType = m.Headers["type"]
	if t, err := time.Parse(time.RFC3339Nano, m.Headers["time"]); err == nil {
		m.Time = t
	}
	return m, CheckMessage(m)
}

// StructuredBatch reads the messages of a CloudEvents JSON batch (a JSON
// array of structured events, application/cloudevents-batch+json), each
// keyed on its own id and source as StructuredMessage reads them.
func StructuredBatch(body []byte, source string) ([]Message, error) {
	var events []json.RawMessage
	if err := json.Unmarshal(body, &events); err != nil {
		return nil, &MessageError{Field: "Payload", Err: errors.New("is not a CloudEvents JSON batch (an array of events)")}
	}
	msgs := make([]Message, 0, len(events))
	for _, e := range events {
		m, err := StructuredMessage(e, source)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}
