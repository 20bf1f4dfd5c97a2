package driver

import (
	"encoding/json"
	"testing"
)

func FuzzDecodeHeaders(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":"b"}`, `{"n":1,"b":true,"x":null,"o":{"k":[1]}}`, `[]`, `"s"`, `{"a":"\u00e9\n"}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := DecodeHeaders(raw)
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if len(raw) > 0 && json.Unmarshal(raw, &obj) != nil {
			t.Fatalf("accepted %q, which is not a JSON object", raw)
		}
		for k, v := range h {
			if string(obj[k]) == "null" {
				t.Fatalf("kept null header %q", k)
			}
			_ = v
		}
	})
}

func TestDecodeHeadersKeepsNonStringValues(t *testing.T) {
	t.Parallel()
	h, err := DecodeHeaders([]byte(`{"s":"x","n":12,"b":false,"o":{"a":1},"z":null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"s": "x", "n": "12", "b": "false", "o": `{"a":1}`}
	if len(h) != len(want) {
		t.Fatalf("got %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Fatalf("header %q = %q, want %q", k, h[k], v)
		}
	}
}

func TestLikePatterns(t *testing.T) {
	t.Parallel()
	got := LikePatterns([]string{"order.*", "a%b_c\\d", "*", "exact"})
	want := []string{"order.%", `a\%b\_c\\d`, "%", "exact"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("LikePatterns[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}
