package emulator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// TestValidationCreate has one row per rule of docs/dev/vercel-sandbox-api.md §9
// item 12 (plus the neighbouring schema checks); every rejection must be 400
// with a message naming the field.
func TestValidationCreate(t *testing.T) {
	te := newEnv(t, Options{})
	tags6 := map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}
	ports16 := make([]int, 16)
	for i := range ports16 {
		ports16[i] = 3000 + i
	}
	for _, tc := range []struct {
		name    string
		path    string // default /v3/sandboxes
		body    string
		code    string
		message string // exact when it starts with "=", else a substring
	}{
		{"vcpus odd", "", `{"resources":{"vcpus":3}}`, "bad_request", "`resources.vcpus` must be 1 or an even number"},
		{"vcpus zero", "", `{"resources":{"vcpus":0}}`, "bad_request", "`resources.vcpus` should be >= 1"},
		{"vcpus above plan max", "", `{"resources":{"vcpus":10}}`, "bad_request", "`resources.vcpus` should be <= 8"},
		{"memory mismatch", "", `{"resources":{"vcpus":2,"memory":2048}}`, "bad_request", "`resources.memory` must equal `resources.vcpus` * 2048 (4096)"},
		{"memory below minimum", "", `{"resources":{"vcpus":1,"memory":1024}}`, "bad_request", "`resources.memory` should be >= 2048"},
		{"too many ports", "", mustJSON(map[string]any{"ports": ports16}), "bad_request", "=Invalid request: `ports` should NOT have more than 15 items."},
		{"duplicate ports", "", `{"ports":[3000,3000]}`, "bad_request", "`ports` should NOT have duplicate items"},
		{"port too low", "", `{"ports":[80]}`, "bad_request", "`ports[0]` should be >= 1024"},
		{"port too high", "", `{"ports":[3000,70000]}`, "bad_request", "`ports[1]` should be <= 65535"},
		{"port 23456", "", `{"ports":[23456]}`, "bad_request", "`ports[0]` must not be 23456"},
		{"timeout too short", "", `{"timeout":999}`, "bad_request", "`timeout` should be >= 1000"},
		{"timeout above plan max", "", `{"timeout":86400001}`, "bad_request", "`timeout` should be <= 86400000"},
		{"too many tags", "", mustJSON(map[string]any{"tags": tags6}), "bad_request", "`tags` should NOT have more than 5 properties"},
		{"tag value too long", "", mustJSON(map[string]any{"tags": map[string]string{"k": strings.Repeat("v", 257)}}), "bad_request", "`tags.k` should NOT be longer than 256 characters"},
		{"name pattern", "", `{"name":"has space"}`, "bad_request", "`name` should match pattern"},
		{"name empty", "", `{"name":""}`, "bad_request", "`name` should match pattern"},
		{"name too long", "", mustJSON(map[string]any{"name": strings.Repeat("n", 129)}), "bad_request", "`name` should NOT be longer than 128 characters"},
		{"keepLast count 0", "", `{"keepLastSnapshots":{"count":0}}`, "bad_request", "`keepLastSnapshots.count` should be >= 1"},
		{"keepLast count 11", "", `{"keepLastSnapshots":{"count":11}}`, "bad_request", "`keepLastSnapshots.count` should be <= 10"},
		{"keepLast without count", "", `{"keepLastSnapshots":{"deleteEvicted":true}}`, "bad_request", "`keepLastSnapshots` should have required property 'count'"},
		{"runtime on v3", "", `{"runtime":"node22"}`, "bad_request", "`runtime` is not allowed"},
		{"runtime on v4", "/v4/sandboxes", `{"runtime":"node22"}`, "bad_request", "`runtime` is not allowed"},
		{"runtime enum on v2", "/v2/sandboxes", `{"runtime":"node12"}`, "bad_request", "`runtime` should be equal to one of the allowed values"},
		{"runtime with image", "/v2/sandboxes", `{"runtime":"node22","image":"vercel/sandbox/node:22"}`, "bad_request", "`runtime` and `image` cannot be used together"},
		{"failover contains region", "", `{"region":"fra1","failoverRegions":["iad1","fra1"]}`, "bad_request", "failoverRegions must not include the sandbox region: fra1"},
		{"failover contains default region", "", `{"failoverRegions":["iad1"]}`, "bad_request", "failoverRegions must not include the sandbox region: iad1"},
		{"unknown property", "", `{"nmae":"x"}`, "bad_request", "`nmae` is not allowed"},
		{"unknown nested property", "", `{"resources":{"vcpus":2,"cpu":1}}`, "bad_request", "`cpu` is not allowed"},
		{"wrong type", "", `{"timeout":"5m"}`, "bad_request", "`timeout` should be integer"},
		{"wrong nested type", "", `{"resources":{"vcpus":"two"}}`, "bad_request", "`resources.vcpus` should be integer"},
		{"not an object", "", `[1,2]`, "bad_request", "body should be object"},
		{"bad json", "", `{"name":`, "bad_request", "not valid JSON"},
		{"region enum", "", `{"region":"mars1"}`, "bad_request", "`region` should be equal to one of the allowed values"},
		{"snapshotExpiration negative", "", `{"snapshotExpiration":-1}`, "bad_request", "`snapshotExpiration` should be >= 0"},
		{"source without type", "", `{"source":{"url":"https://x"}}`, "bad_request", "`source` should have required property 'type'"},
		{"source bad type", "", `{"source":{"type":"svn","url":"https://x"}}`, "bad_request", "`source.type` should be equal to one of the allowed values"},
		{"git username without password", "", `{"source":{"type":"git","url":"https://x","username":"u"}}`, "bad_request", "`source` `username` and `password` must be given together"},
		{"git depth 0", "", `{"source":{"type":"git","url":"https://x","depth":0}}`, "bad_request", "`source.depth` should be >= 1"},
		{"snapshot source with image", "", `{"image":"x","source":{"type":"snapshot","snapshotId":"snap_x"}}`, "bad_request", "`source` of type snapshot cannot be combined"},
		{"network policy bad mode", "", `{"networkPolicy":{"mode":"open"}}`, "bad_request", "`networkPolicy.mode` should be equal to one of the allowed values"},
		{"network policy both forms", "", `{"networkPolicy":{"mode":"custom","allow":["a.com"]}}`, "bad_request", "`networkPolicy` must use either"},
		{"network policy bad cidr", "", `{"networkPolicy":{"mode":"custom","allowedCIDRs":["10.0.0.0/99"]}}`, "bad_request", "`networkPolicy.allowedCIDRs[0]` should be a CIDR range"},
		{"network rule with two actions", "", `{"networkPolicy":{"allow":{"a.com":[{"forwardURL":"https://b.com","transform":[{"headers":{"x":"y"}}]}]}}}`, "bad_request", "must have exactly one of"},
		{"network rule forwardURL with query", "", `{"networkPolicy":{"allow":{"a.com":[{"forwardURL":"https://b.com/?q=1"}]}}}`, "bad_request", "must not contain credentials, a query or a fragment"},
		{"network rule forwardURL over http", "", `{"networkPolicy":{"allow":{"a.com":[{"forwardURL":"http://b.com/broker"}]}}}`, "bad_request", "must be an https URL"},
		{"network response body without contentType", "", `{"networkPolicy":{"allow":{"a.com":[{"response":{"statusCode":200,"body":"x"}}]}}}`, "bad_request", "`contentType` is required"},
		{"network response body on 204", "", `{"networkPolicy":{"allow":{"a.com":[{"response":{"statusCode":204,"body":"x","contentType":"text/plain"}}]}}}`, "bad_request", "must not be set for status 204"},
		{"network response forbidden header", "", `{"networkPolicy":{"allow":{"a.com":[{"response":{"statusCode":200,"headers":{"Content-Length":"1"}}}]}}}`, "bad_request", "must not set \"Content-Length\""},
		{"mounts relative", "", `{"mounts":{"data":{"drive":"d"}}}`, "bad_request", "must be an absolute path"},
		{"mounts too many", "", `{"mounts":{"/a":{"drive":"d"},"/b":{"drive":"d"},"/c":{"drive":"d"},"/d":{"drive":"d"},"/e":{"drive":"d"}}}`, "bad_request", "`mounts` should NOT have more than 4 properties"},
		{"mounts missing drive", "", `{"mounts":{"/data":{"drive":"d1"}}}`, "not_found", "Drive \"d1\" not found"},
		{"image too long", "", mustJSON(map[string]any{"image": strings.Repeat("i", 256)}), "bad_request", "`image` should be between 1 and 255 characters"},
		{"architecture enum", "", `{"architecture":"riscv"}`, "bad_request", "`architecture` should be equal to one of the allowed values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v3/sandboxes"
			}
			body := tc.body
			if strings.HasPrefix(body, "{") {
				body = `{"projectId":"prj_emulator",` + strings.TrimPrefix(body, "{")
			}
			r := te.req("POST", path, body)
			wantStatus := 400
			if tc.code == "not_found" {
				wantStatus = 404
			}
			if r.status != wantStatus || r.errCode() != tc.code {
				t.Fatalf("status %d code %q, want %d %q: %s", r.status, r.errCode(), wantStatus, tc.code, r.body)
			}
			msg := r.errMessage()
			if exact, ok := strings.CutPrefix(tc.message, "="); ok {
				if msg != exact {
					t.Fatalf("message %q, want %q", msg, exact)
				}
			} else if !strings.Contains(msg, tc.message) {
				t.Fatalf("message %q does not contain %q", msg, tc.message)
			}
		})
	}
	if n := len(te.e.LiveSandboxes()); n != 0 {
		t.Fatalf("rejected creates left %d sandboxes", n)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestValidationAccepts(t *testing.T) {
	te := newEnv(t, Options{})
	for _, body := range []string{
		`{}`,
		`{"resources":{"vcpus":1}}`,
		`{"resources":{"vcpus":8,"memory":16384}}`,
		`{"ports":[]}`,
		`{"ports":[1024,65535]}`,
		`{"timeout":1000}`,
		`{"name":"a_B-9","tags":{"a":"1","b":"2","c":"3","d":"4","e":"5"}}`,
		`{"keepLastSnapshots":{"count":10,"expiration":0,"deleteEvicted":false}}`,
		`{"region":"fra1","failoverRegions":["iad1","cdg1"]}`,
		`{"__private":{"anything":true}}`,
		`{"image":"vercel/sandbox/node:24","architecture":"arm64"}`,
		`{"source":{"type":"git","url":"https://github.com/vercel/sandbox.git","depth":1,"revision":"main","username":"u","password":"p"}}`,
		`{"source":{"type":"tarball","url":"https://example.com/x.tar.gz"}}`,
		`{"networkPolicy":{"mode":"allow-all"}}`,
		`{"networkPolicy":{"allow":["*.github.com"],"subnets":{"allow":["10.0.0.0/8"],"deny":["10.1.0.0/16"]}}}`,
		`{"networkPolicy":{"allow":{"api.github.com":[{"match":{"path":{"startsWith":"/repos"},"method":["GET"]},"transform":[{"headers":{"Authorization":"Bearer s3cret"}}]}]}}}`,
		`{"mounts":{}}`,
		`{"env":{"A":"1"},"persistent":false,"snapshotExpiration":0,"networkId":"net_1"}`,
	} {
		full := `{"projectId":"prj_emulator"}`
		if body != "{}" {
			full = `{"projectId":"prj_emulator",` + strings.TrimPrefix(body, "{")
		}
		r := te.req("POST", "/v3/sandboxes", full)
		if r.status != 200 {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}
	r := te.req("POST", "/v2/sandboxes", `{"projectId":"prj_emulator","runtime":"python3.13"}`)
	if r.status != 200 {
		t.Errorf("v2 runtime: %d %s", r.status, r.body)
	}
}

func TestValidationOtherEndpoints(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "v"})
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID
	for _, tc := range []struct {
		name, method, path, body, field string
		status                          int
	}{
		{"patch unknown", "PATCH", "/v2/sandboxes/v" + prj, `{"source":{}}`, "`source`", 400},
		{"patch memory", "PATCH", "/v2/sandboxes/v" + prj, `{"resources":{"vcpus":4,"memory":4096}}`, "`resources.memory`", 400},
		{"patch ports", "PATCH", "/v2/sandboxes/v" + prj, `{"ports":[23456]}`, "`ports[0]`", 400},
		{"patch tags", "PATCH", "/v2/sandboxes/v" + prj, mustJSON(map[string]any{"tags": map[string]string{"a": "", "b": "", "c": "", "d": "", "e": "", "f": ""}}), "`tags`", 400},
		{"patch failover", "PATCH", "/v2/sandboxes/v" + prj, `{"failoverRegions":["iad1"]}`, "failoverRegions", 400},
		{"cmd missing command", "POST", sess + "/cmd", `{"args":[]}`, "`command`", 400},
		{"cmd timeout", "POST", sess + "/cmd", `{"command":"ls","timeout":50}`, "`timeout`", 400},
		{"cmd unknown", "POST", sess + "/cmd", `{"command":"ls","shell":true}`, "`shell`", 400},
		{"kill no signal", "POST", sess + "/cmd/cmd_x/kill", `{}`, "`signal`", 400},
		{"read no path", "POST", sess + "/fs/read", `{}`, "`path`", 400},
		{"mkdir no path", "POST", sess + "/fs/mkdir", `{"recursive":true}`, "`path`", 400},
		{"extend missing", "POST", sess + "/extend-timeout", `{}`, "`duration`", 400},
		{"snapshot unknown", "POST", sess + "/snapshot", `{"ttl":1}`, "`ttl`", 400},
		{"list limit", "GET", "/v2/sandboxes?project=prj_emulator&limit=51", "", "`limit`", 400},
		{"list sortBy", "GET", "/v2/sandboxes?project=prj_emulator&sortBy=size", "", "`sortBy`", 400},
		{"list namePrefix without sortBy=name", "GET", "/v2/sandboxes?project=prj_emulator&namePrefix=a", "", "`namePrefix`", 400},
		{"list status with sortBy=name", "GET", "/v2/sandboxes?project=prj_emulator&sortBy=name&status=running", "", "`status`", 400},
		{"list two tags", "GET", "/v2/sandboxes?project=prj_emulator&tags=a:1&tags=b:2", "", "`tags`", 400},
		{"list bad cursor", "GET", "/v2/sandboxes?project=prj_emulator&cursor=zzz", "", "`cursor`", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			r := te.req(tc.method, tc.path, body)
			if r.status != tc.status || !strings.Contains(r.errMessage(), tc.field) {
				t.Fatalf("%d %s, want %d naming %s", r.status, r.body, tc.status, tc.field)
			}
		})
	}
	// Nothing was changed by the rejected PATCHes.
	_, g := te.getSandbox("v", false)
	if g.Sandbox.VCPUs != 2 || g.Sandbox.Tags != nil {
		t.Fatalf("rejected patch applied: %+v", g.Sandbox)
	}
}

func TestNetworkPolicyRedaction(t *testing.T) {
	te := newEnv(t, Options{})
	const secret = "s3cr3t-token-value"
	r := te.must(200, "POST", "/v3/sandboxes", map[string]any{
		"projectId": "prj_emulator", "name": "np",
		"networkPolicy": map[string]any{
			"mode": "custom", "allowedDomains": []string{"api.github.com"}, "deniedCIDRs": []string{"169.254.0.0/16"},
			"injectionRules": []map[string]any{{"domain": "api.github.com", "headers": map[string]string{"Authorization": "Bearer " + secret, "X-Extra": secret}}},
		},
	}, nil)
	if strings.Contains(string(r.body), secret) {
		t.Fatalf("secret leaked in create answer: %s", r.body)
	}
	var out vercel.SandboxResponse
	r.json(t, &out)
	for _, np := range []*vercel.NetworkPolicy{out.Sandbox.NetworkPolicy, out.Session.NetworkPolicy} {
		if np == nil || np.Mode != "custom" || len(np.InjectionRules) != 1 || strings.Join(np.InjectionRules[0].HeaderNames, ",") != "Authorization,X-Extra" ||
			np.InjectionRules[0].Headers != nil || np.AllowedDomains[0] != "api.github.com" || np.DeniedCIDRs[0] != "169.254.0.0/16" {
			t.Fatalf("policy: %+v", np)
		}
	}
	// The B form through the session endpoint.
	var sr struct {
		Session vercel.Session `json:"session"`
	}
	r = te.must(200, "POST", "/v2/sandboxes/sessions/"+out.Session.ID+"/network-policy", map[string]any{
		"allow": map[string]any{
			"api.openai.com": []map[string]any{{"transform": []map[string]any{{"headers": map[string]string{"Authorization": secret}}}}},
			"proxy.internal": []map[string]any{{"forwardURL": "https://fwd.example.com/base"}},
		},
		"subnets": map[string]any{"allow": []string{"10.0.0.0/8"}},
	}, &sr)
	if strings.Contains(string(r.body), secret) {
		t.Fatalf("secret leaked: %s", r.body)
	}
	np := sr.Session.NetworkPolicy
	if np.Mode != "custom" || len(np.AllowedDomains) != 2 || len(np.InjectionRules) != 1 || np.InjectionRules[0].HeaderNames[0] != "Authorization" ||
		len(np.ForwardRules) != 1 || np.ForwardRules[0].ForwardURL != "https://fwd.example.com/base" || np.AllowedCIDRs[0] != "10.0.0.0/8" {
		t.Fatalf("B form answer: %+v", np)
	}
	// GETs, lists and the admin state never carry the value either.
	for _, p := range []string{"/v2/sandboxes/np" + prj, "/v2/sandboxes?project=prj_emulator", "/v2/sandboxes/sessions/" + out.Session.ID, "/_emulator/state"} {
		if r := te.must(200, "GET", p, nil, nil); strings.Contains(string(r.body), secret) {
			t.Fatalf("secret leaked by %s", p)
		}
	}
	// Shorthand modes echo.
	sr.Session = vercel.Session{}
	te.must(200, "POST", "/v2/sandboxes/sessions/"+out.Session.ID+"/network-policy", map[string]any{"mode": "deny-all"}, &sr)
	if sr.Session.NetworkPolicy.Mode != "deny-all" || sr.Session.NetworkPolicy.AllowedDomains != nil {
		t.Fatalf("deny-all: %+v", sr.Session.NetworkPolicy)
	}
}
