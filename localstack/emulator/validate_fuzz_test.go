package emulator

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidateCreate checks that the create/fork/update validators never
// panic on any body, that whatever they accept yields a sandbox within the
// limits, and that bodies built to be valid are accepted.
// Seed corpus: testdata/fuzz/FuzzValidateCreate.
func FuzzValidateCreate(f *testing.F) {
	f.Add([]byte(`{"name":"a","resources":{"vcpus":2},"ports":[3000]}`), uint8(1), uint8(1), uint32(60000), uint8(2), "seed-name")
	e, err := New(Options{Exec: "none", Clock: NewFakeClock(t0), Token: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Close() })
	kinds := []routeKind{routeCreateV2, routeCreateV3, routeCreateV4, routeForkV2, routeForkV3}

	f.Fuzz(func(t *testing.T, body []byte, kindSel, vcpuSel uint8, timeoutSel uint32, nports uint8, name string) {
		kind := kinds[int(kindSel)%len(kinds)]
		base := &sandboxRec{vcpus: 2, memory: 4096, timeout: 300000, region: defaultRegion, persistent: true}

		// 1. Arbitrary input: no panic; anything accepted is within limits.
		var b createBody
		if decodeBody(body, &b, true) == nil {
			var fb *sandboxRec
			if kind == routeForkV2 || kind == routeForkV3 {
				fb = base
			}
			if e.validateCreate(&b, kind, fb) == nil {
				sb := *base
				e.configFromBody(&sb, &b, kind)
				checkSandboxInvariants(t, e, &sb, string(body))
				_ = e.renderSandbox(&sb)
			}
		}
		var ub updateBody
		if decodeBody(body, &ub, true) == nil {
			_ = e.validateUpdate(&ub, base)
		}
		_, _ = parsePolicy(body)

		// 2. A body built to be valid must be accepted.
		vcpus := []int64{1, 2, 4, 6, 8}[int(vcpuSel)%5]
		valid := map[string]any{
			"resources": map[string]any{"vcpus": vcpus, "memory": vcpus * 2048},
			"timeout":   1000 + int64(timeoutSel)%(durMs(e.plan.MaxSessionDuration)-999),
		}
		ports := []int64{}
		for i := 0; i < int(nports)%16; i++ {
			ports = append(ports, 1024+int64(i)*997%64000)
		}
		valid["ports"] = ports
		clean := strings.Map(func(r rune) rune {
			if r < 128 && namePattern.MatchString(string(r)) {
				return r
			}
			return -1
		}, name)
		if len(clean) > 128 {
			clean = clean[:128]
		}
		if clean != "" {
			valid["name"] = clean
		}
		if kind == routeCreateV2 {
			valid["runtime"] = runtimes[int(vcpuSel)%len(runtimes)]
		}
		raw, _ := json.Marshal(valid)
		var vb createBody
		if err := decodeBody(raw, &vb, false); err != nil {
			t.Fatalf("valid body %s rejected by the decoder: %v", raw, err)
		}
		var fb *sandboxRec
		if kind == routeForkV2 || kind == routeForkV3 {
			fb = base
		}
		if err := e.validateCreate(&vb, kind, fb); err != nil {
			t.Fatalf("valid body %s (kind %d) rejected: %v", raw, kind, err)
		}
	})
}

func checkSandboxInvariants(t *testing.T, e *Emulator, sb *sandboxRec, body string) {
	t.Helper()
	if sb.vcpus < 1 || (sb.vcpus != 1 && sb.vcpus%2 != 0) || sb.vcpus > int64(e.plan.MaxVCPUs) {
		t.Fatalf("accepted vcpus %d from %s", sb.vcpus, body)
	}
	if sb.memory != sb.vcpus*2048 {
		t.Fatalf("accepted memory %d for %d vcpus from %s", sb.memory, sb.vcpus, body)
	}
	if sb.timeout < 1000 || sb.timeout > durMs(e.plan.MaxSessionDuration) {
		t.Fatalf("accepted timeout %d from %s", sb.timeout, body)
	}
	if len(sb.ports) > e.plan.MaxPorts {
		t.Fatalf("accepted %d ports from %s", len(sb.ports), body)
	}
	seen := map[int64]bool{}
	for _, p := range sb.ports {
		if p < 1024 || p > 65535 || p == 23456 || seen[p] {
			t.Fatalf("accepted port %d from %s", p, body)
		}
		seen[p] = true
	}
	if len(sb.tags) > 5 {
		t.Fatalf("accepted %d tags from %s", len(sb.tags), body)
	}
	for _, v := range sb.tags {
		if len(v) > 256 {
			t.Fatalf("accepted a long tag from %s", body)
		}
	}
	for _, r := range sb.failover {
		if r == sb.region {
			t.Fatalf("accepted failover region = region from %s", body)
		}
	}
	if sb.keepLast != nil && (sb.keepLast.Count < 1 || sb.keepLast.Count > 10 || sb.keepLast.DeleteEvicted == nil) {
		t.Fatalf("accepted keepLastSnapshots %+v from %s", sb.keepLast, body)
	}
}
