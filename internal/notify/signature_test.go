package notify

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The vectors were computed by the standardwebhooks npm package 1.3.0
// (Svix's reference implementation): the first is the specification's own
// example, the second a raw key as a signing Secret holds it, given to the
// receiver as whsec_ + base64.
func TestSignStandardMatchesTheReferenceImplementation(t *testing.T) {
	key, err := StandardKey([]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := SignStandard(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`)), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("the specification's example: %s, want %s", got, want)
	}
	key, err = StandardKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := SignStandard(key, "evt-1", "1800000000", []byte(`{"id":"evt-1"}`)), "v1,qIsED60bbrIwxibwRivAFsaPxxsm6HK73ohnv9xCoI0="; got != want {
		t.Errorf("a raw key: %s, want %s", got, want)
	}
	if got, want := ReceiverSecret([]byte("0123456789abcdef0123456789abcdef")), "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; got != want {
		t.Errorf("the receiver's secret of a raw key: %s, want %s", got, want)
	}
	if got := ReceiverSecret([]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")); got != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" {
		t.Errorf("the receiver's secret of a whsec_ value is that value, got %s", got)
	}
}

func TestStandardKeyRefusesAWhsecValueThatIsNotOne(t *testing.T) {
	for name, v := range map[string]string{
		"not base64":        "whsec_not base64!",
		"fewer than 16 B":   "whsec_c2hvcnQ=",
		"nothing after it":  "whsec_",
		"url-safe alphabet": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw-_",
	} {
		if _, err := StandardKey([]byte(v)); err == nil {
			t.Errorf("%s: accepted %q", name, v)
		}
	}
}

func TestVerifyStandard(t *testing.T) {
	value := []byte("a signing key of the namespace, 32B")
	key, _ := StandardKey(value)
	secret := ReceiverSecret(value)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt-1"}`)
	headers := func(id string, at time.Time, sig string) http.Header {
		ts := strconv.FormatInt(at.Unix(), 10)
		if sig == "" {
			sig = SignStandard(key, id, ts, body)
		}
		h := http.Header{}
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, sig)
		return h
	}
	if err := VerifyStandard(secret, headers("evt-1", now, ""), body, now, 5*time.Minute); err != nil {
		t.Fatalf("a genuine delivery was refused: %v", err)
	}
	rotated := headers("evt-1", now, "v1,bm90IHRoaXMgb25l "+SignStandard(key, "evt-1", strconv.FormatInt(now.Unix(), 10), body))
	if err := VerifyStandard(secret, rotated, body, now, 5*time.Minute); err != nil {
		t.Errorf("one matching signature of several was refused: %v", err)
	}
	idChanged := headers("evt-1", now, "")
	idChanged.Set(HeaderWebhookID, "evt-2")
	for name, c := range map[string]struct {
		secret string
		h      http.Header
		body   []byte
	}{
		"body changed":       {secret, headers("evt-1", now, ""), []byte(`{"id":"evt-2"}`)},
		"id changed":         {secret, idChanged, body},
		"six minutes old":    {secret, headers("evt-1", now.Add(-6*time.Minute), ""), body},
		"six minutes ahead":  {secret, headers("evt-1", now.Add(6*time.Minute), ""), body},
		"other secret":       {ReceiverSecret([]byte("another key of the namespace, 32B")), headers("evt-1", now, ""), body},
		"no headers":         {secret, http.Header{}, body},
		"the old scheme":     {secret, headers("evt-1", now, Sign(value, strconv.FormatInt(now.Unix(), 10), body)), body},
		"secret not base64":  {"whsec_%%%", headers("evt-1", now, ""), body},
		"raw value as given": {string(value), headers("evt-1", now, ""), body},
	} {
		if err := VerifyStandard(c.secret, c.h, c.body, now, 5*time.Minute); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
