package notify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of every delivery. Two signatures go with each message: the
// Standard Webhooks one (https://www.standardwebhooks.com, spec v1), which
// any verifier library of that specification accepts, and, for one release,
// the scheme of earlier releases (X-Sandbox-*), deprecated.
const (
	// HeaderWebhookID is the message's id: the CloudEvent's id, the same on
	// every retry and every duplicate, so a receiver drops what it has seen.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp is when the attempt was made, Unix seconds.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature is "v1," and the base64 HMAC-SHA256 of
	// "<id>.<timestamp>.<body>" under StandardKey of the signing Secret.
	HeaderWebhookSignature = "webhook-signature"

	// HeaderSignature and HeaderTimestamp are the signature of earlier
	// releases. Deprecated: they are sent for one more release; verify the
	// Standard Webhooks headers instead.
	HeaderSignature = "X-Sandbox-Signature"
	HeaderTimestamp = "X-Sandbox-Timestamp"
	// ContentType is CloudEvents 1.0 structured mode in JSON.
	ContentType = "application/cloudevents+json; charset=utf-8"
)

// SecretPrefix starts a Standard Webhooks secret: the base64 of the key
// follows it.
const SecretPrefix = "whsec_"

// StandardKey is the Standard Webhooks HMAC key that the value stored in a
// signing Secret stands for, so that a receiver configured as the
// specification says verifies:
//
//   - a value "whsec_<base64>" is a Standard Webhooks secret: the key is the
//     decoded bytes, and the receiver is given the same string;
//   - any other value is the key itself, and the receiver is given
//     "whsec_" + base64(value) — which is "whsec_" followed by the Secret's
//     data field as `kubectl get secret -o jsonpath='{.data.key}'` prints it.
//
// A "whsec_" value that is not base64 of at least MinKeyLength bytes is an
// error (the receiver would decode something else).
func StandardKey(value []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(value, []byte(SecretPrefix))
	if !ok {
		return value, nil
	}
	key, err := base64.StdEncoding.DecodeString(string(rest))
	if err != nil {
		return nil, errors.New("a value starting with " + SecretPrefix + " must be followed by standard base64")
	}
	if len(key) < MinKeyLength {
		return nil, errors.New("a value starting with " + SecretPrefix + " must encode at least " + strconv.Itoa(MinKeyLength) + " bytes")
	}
	return key, nil
}

// ReceiverSecret is the secret a Standard Webhooks receiver is configured
// with for the value stored in the signing Secret (see StandardKey).
func ReceiverSecret(value []byte) string {
	if bytes.HasPrefix(value, []byte(SecretPrefix)) {
		return string(value)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(value)
}

// SignStandard returns the webhook-signature value of body with id, sent at
// timestamp (Unix seconds), under key (StandardKey).
func SignStandard(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// VerifyStandard checks a delivery as the Standard Webhooks specification
// says a receiver does: secret is what the receiver was configured with
// ("whsec_<base64>", see ReceiverSecret), h the request's headers and body
// its raw bytes. One of the space-separated v1 signatures must match (in
// constant time), and the timestamp must be within tolerance of now (the
// specification's libraries use 5 minutes), so a replay is refused.
func VerifyStandard(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) == 0 {
		return errors.New("notify: the receiver's secret is not whsec_<base64>")
	}
	id, ts, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return errors.New("notify: missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("notify: webhook-timestamp is not Unix seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("notify: webhook-timestamp is outside the tolerance")
	}
	want := []byte(SignStandard(key, id, ts, body))
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return errors.New("notify: no webhook-signature matches")
}

// Sign returns the X-Sandbox-Signature value of body sent at timestamp
// (Unix seconds): "sha256=" and the hex HMAC-SHA256, keyed with key, of the
// timestamp, a dot, and the body.
//
// Deprecated: the X-Sandbox-* headers go in the next release; use
// SignStandard.
func Sign(key []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a delivery's X-Sandbox-* headers: the signature matches (in
// constant time) and the timestamp is within tolerance of now.
//
// Deprecated: the X-Sandbox-* headers go in the next release; use
// VerifyStandard.
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
