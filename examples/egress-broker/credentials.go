package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// This file decides which credential a request carries upstream. A real
// broker mints one per request (a GitHub App installation token scoped to
// the conversation's repositories, a Sentry token for its organization);
// the example reads fixed ones from a mounted Secret.

// Credentials gives the headers that authenticate a conversation's request
// to an upstream host. It returns errNoCredential when the conversation
// has none for that host: the broker then refuses the request, so a
// credential is only ever sent to the host it was issued for.
type Credentials interface {
	Headers(ctx context.Context, conversation, host string) (http.Header, error)
}

var errNoCredential = errors.New("no credential for this conversation and host")

// staticCredentials maps conversation → upstream host → header → value.
type staticCredentials map[string]map[string]map[string]string

// loadStaticCredentials reads a JSON file such as a mounted Secret's key:
//
//	{"conv-7": {"api.github.com": {"Authorization": "Bearer ghs_..."}}}
//
// Errors never quote the file's content.
func loadStaticCredentials(path string) (staticCredentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c staticCredentials
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object of conversation → host → header → value", path)
	}
	return c, nil
}

func (c staticCredentials) Headers(_ context.Context, conversation, host string) (http.Header, error) {
	hdrs, ok := c[conversation][strings.ToLower(host)]
	if !ok || len(hdrs) == 0 {
		return nil, errNoCredential
	}
	h := http.Header{}
	for k, v := range hdrs {
		h.Set(k, v)
	}
	return h, nil
}
