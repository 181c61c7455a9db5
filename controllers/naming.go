package controllers

import (
	"crypto/sha256"
	"encoding/hex"
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
	sum := sha256.Sum256([]byte(namespace + "/" + name + "/" + string(uid)))
	suffix := "-" + hex.EncodeToString(sum[:])[:16]
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
