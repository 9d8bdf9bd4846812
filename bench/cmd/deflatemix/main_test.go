package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestMixIsOVOSMessages: the built-in mix is the same on every run, and
// every message is an OVOS message with a type, data and a context that
// carries a session.
func TestMixIsOVOSMessages(t *testing.T) {
	a, b := generateMix(300), generateMix(300)
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("message %d differs between two runs", i)
		}
		var m struct {
			Type    string         `json:"type"`
			Data    map[string]any `json:"data"`
			Context map[string]any `json:"context"`
		}
		if err := json.Unmarshal(a[i], &m); err != nil || m.Type == "" || m.Data == nil || m.Context == nil {
			t.Fatalf("message %d is not an OVOS message (%v): %s", i, err, a[i])
		}
	}
}

// TestMeasureDecodes: measure checks each message decodes; a context
// shrinks the mix.
func TestMeasureDecodes(t *testing.T) {
	mix := generateMix(200)
	none, err := measure(mix, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := measure(mix, 4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.wire >= none.wire {
		t.Fatalf("%d bytes with a context, %d without", ctx.wire, none.wire)
	}
}
