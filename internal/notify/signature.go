package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Headers of every delivery. The signature covers the timestamp and the body,
// so a receiver that refuses old timestamps refuses a replayed message, and
// the timestamp cannot be changed without breaking the signature.
const (
	HeaderSignature = "X-Sandbox-Signature"
	HeaderTimestamp = "X-Sandbox-Timestamp"
	// ContentType is CloudEvents 1.0 structured mode in JSON.
	ContentType = "application/cloudevents+json; charset=utf-8"
)

// Sign returns the X-Sandbox-Signature value of body sent at timestamp
// (Unix seconds): "sha256=" and the hex HMAC-SHA256, keyed with key, of the
// timestamp, a dot, and the body.
func Sign(key []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a delivery as a receiver should: the signature matches (in
// constant time) and the timestamp is within tolerance of now.
func Verify(key []byte, signature, timestamp string, body []byte, now time.Time, tolerance time.Duration) error {
	if !strings.HasPrefix(signature, "sha256=") {
		return errors.New("notify: signature is not sha256=<hex>")
	}
	if !hmac.Equal([]byte(signature), []byte(Sign(key, timestamp, body))) {
		return errors.New("notify: signature does not match")
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("notify: timestamp is not Unix seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("notify: timestamp is outside the tolerance")
	}
	return nil
}
