package controllers

import "testing"

func TestVercelHealthSignalsRecoveryAfterAnOutageOnly(t *testing.T) {
	h := &VercelHealth{}
	ch := h.subscribe()
	signalled := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	// A blip: fewer failures than an outage.
	for i := 0; i < outageFailures-1; i++ {
		h.ObserveRequest("getSandbox", 503, 0)
	}
	h.ObserveRequest("getSandbox", 200, 0)
	if signalled() {
		t.Fatal("a blip was taken for an outage")
	}
	// An outage (no answer counts as a failure too), then an answer.
	for i := 0; i < outageFailures; i++ {
		h.ObserveRequest("getSandbox", []int{503, 0}[i%2], 0)
	}
	if signalled() {
		t.Fatal("signalled before Vercel answered")
	}
	h.ObserveRequest("getSandbox", 404, 0) // any answer shows the API is up
	if !signalled() {
		t.Fatal("recovery not signalled")
	}
	h.ObserveRequest("getSandbox", 200, 0)
	if signalled() {
		t.Fatal("signalled twice for one recovery")
	}
	h.unsubscribe(ch)
	var nilHealth *VercelHealth
	nilHealth.ObserveRequest("getSandbox", 503, 0) // must not panic
}
