package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// maxVercelNameLength is Vercel's limit on sandbox names.
const maxVercelNameLength = 128

// vercelName derives the Vercel sandbox name of an object: namespace, name and
// the first 8 characters of its UID, with every character outside
// [a-zA-Z0-9_-] replaced by '-'. The UID part makes a re-created object with
// the same name get a new sandbox rather than adopt its predecessor's. Names
// that would exceed 128 characters keep a prefix and gain a hash of the whole,
// so the result is deterministic, valid and unique per object.
func vercelName(namespace, name string, uid types.UID) string {
	u := string(uid)
	if len(u) > 8 {
		u = u[:8]
	}
	full := sanitizeName(namespace + "-" + name + "-" + u)
	if len(full) <= maxVercelNameLength {
		return full
	}
	suffix := "-" + shortHash(namespace+"/"+name+"/"+string(uid), 16)
	return full[:maxVercelNameLength-len(suffix)] + suffix
}

func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		default:
			return '-'
		}
	}, s)
}

// Kubernetes limits on the names the fork controller derives.
const (
	// maxLabelValueLength is the limit of a label value.
	maxLabelValueLength = 63
	// maxObjectNameLength is the limit of a DNS subdomain, the name of a
	// Sandbox or SandboxSnapshot.
	maxObjectNameLength = 253
	// nameHashLength is how many hex digits of SHA-256 stand for the part of
	// a name cut off: 64 bits, so distinct names do not collide in practice.
	nameHashLength = 16
)

// labelValue is an object name (a DNS subdomain) as a label value: the name
// itself when it fits in 63 characters, else its first 46 characters, "-"
// and a hash of the whole name. A name starts with an alphanumeric
// character and the hash ends with one, as a label value must.
func labelValue(name string) string {
	if len(name) <= maxLabelValueLength {
		return name
	}
	return hashedName(name, "", maxLabelValueLength)
}

// derivedName is the name of an object derived from base, such as a fork's
// child (base "-3") or capture (base "-capture"): base+suffix when that is a
// valid name length, else a prefix of base, "-", a hash of the whole base,
// and suffix, 253 characters in all. It stays a valid DNS subdomain when
// base is one and suffix is "-" followed by lowercase alphanumerics.
func derivedName(base, suffix string) string {
	if len(base)+len(suffix) <= maxObjectNameLength {
		return base + suffix
	}
	return hashedName(base, suffix, maxObjectNameLength)
}

// hashedName is a prefix of name, "-", the hash of name, and suffix, max
// characters long. The prefix loses trailing '-' and '.' so that no DNS label
// of the result starts or ends with one.
func hashedName(name, suffix string, max int) string {
	hash := shortHash(name, nameHashLength)
	prefix := strings.TrimRight(name[:max-len(suffix)-1-nameHashLength], "-.")
	return prefix + "-" + hash + suffix
}

// shortHash is the first n hex digits of the SHA-256 of s: a short, stable
// stand-in for s in names, labels and status. Changing it renames remote
// objects, so every caller's output must stay as it is.
func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// recreatedName is the Vercel name of the n-th recreation of the sandbox
// first named base: base itself for n = 0, else base with "-r<n>", cut to
// Vercel's length limit (base ends in a UID part or hash, so the cut name
// stays unique per object).
func recreatedName(base string, n int32) string {
	if n == 0 {
		return base
	}
	suffix := fmt.Sprintf("-r%d", n)
	if len(base)+len(suffix) > maxVercelNameLength {
		base = base[:maxVercelNameLength-len(suffix)]
	}
	return base + suffix
}
