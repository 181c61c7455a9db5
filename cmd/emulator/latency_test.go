package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunLatencyProfile: --latency-profile=vercel holds a create until the
// (fake) clock has passed its delay; an unknown profile is refused naming
// the flag.
func TestRunLatencyProfile(t *testing.T) {
	err := run(context.Background(), []string{"--exec=none", "--latency-profile=fast"}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "--latency-profile") || !strings.Contains(err.Error(), "vercel") {
		t.Fatalf("unknown profile: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--exec=none", "--token=tok", "--fake-clock", "--latency-profile=vercel", "--latency-seed=3"}, &out, &errOut, ready)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("run: %v (%s)", err, errOut.String())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	post := func(path, body string) (int, error) {
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		res, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	created := make(chan int, 1)
	go func() {
		code, _ := post("/v3/sandboxes", `{"projectId":"prj_emulator"}`)
		created <- code
	}()
	select {
	case code := <-created:
		t.Fatalf("create answered %d before the clock moved", code)
	case <-time.After(300 * time.Millisecond):
	}
	// The cap of a draw is 10 × the median (1.55 s). Advanced again until
	// it answers, in case the request was not parked yet on a slow machine.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, err := post("/_emulator/clock/advance", `{"ms":16000}`); err != nil || code != 200 {
			t.Fatalf("advance: %d %v", code, err)
		}
		select {
		case code := <-created:
			if code != 200 {
				t.Fatalf("create: %d", code)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("create still held after the clock passed its delay")
		}
	}
}
