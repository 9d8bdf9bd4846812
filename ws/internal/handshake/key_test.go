package handshake

import (
	"encoding/base64"
	"testing"
)

func TestAcceptKeyRFCExample(t *testing.T) {
	// RFC 6455 §1.3.
	const key, want = "dGhlIHNhbXBsZSBub25jZQ==", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
	if got := AcceptKey(key); got != want {
		t.Fatalf("AcceptKey(%q) = %q, want %q", key, got, want)
	}
}

func TestNewChallengeKey(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		k, err := NewChallengeKey()
		if err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil || len(b) != 16 {
			t.Fatalf("key %q: %d bytes, %v", k, len(b), err)
		}
		if !validChallengeKey(k) {
			t.Fatalf("validChallengeKey(%q) = false", k)
		}
		if seen[k] {
			t.Fatalf("key %q repeated", k)
		}
		seen[k] = true
	}
}

func TestValidChallengeKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"dGhlIHNhbXBsZSBub25jZQ==", true},
		{"AAAAAAAAAAAAAAAAAAAAAA==", true},
		{"", false},
		{"dGhlIHNhbXBsZSBub25jZQ", false},       // unpadded
		{"dGhlIHNhbXBsZSBub25jZXg=", false},     // 17 bytes
		{"dGhlIHNhbXBsZSBub25j", false},         // 15 bytes
		{"dGhlIHNhbXBsZSBub25jZQ=!", false},     // bad character
		{"dGhlIHNhbXBsZSBub25jZQ== ", false},    // trailing space (trimmed by callers)
		{"????????????????????????", false},     // not base64
		{"dGhlIHNhbXBsZSBub25jZQ==AAAA", false}, // too long
	} {
		if got := validChallengeKey(tc.key); got != tc.want {
			t.Errorf("validChallengeKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}
