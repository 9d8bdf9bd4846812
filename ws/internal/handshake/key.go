package handshake

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
)

// keyGUID is the fixed GUID of RFC 6455 §1.3 appended to the challenge key.
const keyGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// AcceptKey returns the Sec-WebSocket-Accept value for a Sec-WebSocket-Key
// challenge (RFC 6455 §4.2.2 step 5.4): base64(SHA-1(key + GUID)).
func AcceptKey(challengeKey string) string {
	h := sha1.New()
	h.Write([]byte(challengeKey))
	h.Write([]byte(keyGUID))
	var sum [sha1.Size]byte
	return base64.StdEncoding.EncodeToString(h.Sum(sum[:0]))
}

// NewChallengeKey returns a fresh Sec-WebSocket-Key: 16 random bytes,
// base64-encoded (RFC 6455 §4.1).
func NewChallengeKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b[:]), nil
}

// validChallengeKey reports whether key is the base64 encoding of exactly 16
// bytes (RFC 6455 §4.2.1 item 5).
func validChallengeKey(key string) bool {
	if len(key) != 24 { // base64 of 16 bytes, padded
		return false
	}
	var b [18]byte
	n, err := base64.StdEncoding.Decode(b[:], []byte(key))
	return err == nil && n == 16
}
