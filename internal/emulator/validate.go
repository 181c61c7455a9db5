package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getsentry/sandbox-controller/internal/emulator/sandboxruntime"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// apiError is an error answer: status plus the §7.1 envelope.
type apiError struct {
	status  int
	code    string
	message string
	header  map[string]string
	limit   *rateLimitInfo
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: 400, code: "bad_request", message: fmt.Sprintf(format, args...)}
}

// invalid formats an ajv-style validation message naming the field.
func invalid(field, format string, args ...any) *apiError {
	return badRequest("Invalid request: `%s` %s.", field, fmt.Sprintf(format, args...))
}

func notFound(format string, args ...any) *apiError {
	return &apiError{status: 404, code: "not_found", message: fmt.Sprintf(format, args...)}
}

func additionalProperty(name string) *apiError {
	return badRequest("Invalid request: `%s` is not allowed: should NOT have additional properties.", name)
}

var (
	namePattern     = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	snapshotPattern = regexp.MustCompile(`^(?:snap_[A-Za-z0-9]{28}|vhs_[a-z0-9]{28})$`)
	regions         = []string{"iad1", "sfo1", "cle1", "cdg1", "fra1", "arn1", "sin1", "pdx1", "lhr1", "icn1", "bom1", "cpt1", "dub1", "gru1", "hkg1", "syd1", "yul1", "hnd1", "kix1"}
	runtimes        = []string{"node22", "node24", "node26", "python3.13"}
)

const (
	defaultRegion  = "iad1"
	defaultRuntime = "node24"
	defaultImage   = "vercel/sandbox/universal:latest"
	defaultCwd     = sandboxruntime.Workdir
	defaultVCPUs   = 2
	memoryPerVCPU  = 2048
	sevenDaysMs    = int64(7 * 24 * 3600 * 1000)
	maxTagValueLen = 256
	maxTags        = 5
	maxNameLen     = 128
)

// decodeBody decodes a JSON request body strictly (unknown properties are
// rejected with a message naming them). Top-level "__*" properties — private
// parameters the SDKs forward verbatim — are ignored. An empty body decodes
// as {} when allowEmpty.
func decodeBody(body []byte, dst any, allowEmpty bool) *apiError {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || (allowEmpty && string(body) == "null") {
		if allowEmpty {
			return nil
		}
		return badRequest("Invalid request: body should be object.")
	}
	if body[0] != '{' {
		return badRequest("Invalid request: body should be object.")
	}
	if bytes.Contains(body, []byte(`"__`)) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return jsonError(err)
		}
		changed := false
		for k := range m {
			if strings.HasPrefix(k, "__") {
				delete(m, k)
				changed = true
			}
		}
		if changed {
			body, _ = json.Marshal(m)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("Invalid request: unexpected data after the JSON body.")
	}
	return nil
}

func jsonError(err error) *apiError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("Invalid request: body is not valid JSON (%s at offset %d).", se.Error(), se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("Invalid request: body should be object.")
		}
		return invalid(te.Field, "should be %s", jsonTypeName(te.Type))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return additionalProperty(name)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return badRequest("Invalid request: body is not valid JSON (unexpected end).")
	}
	return badRequest("Invalid request: %s.", err.Error())
}

func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		if t == reflect.TypeFor[json.RawMessage]() {
			return "object"
		}
		return "array"
	}
	return "object"
}

func isNull(raw json.RawMessage) bool {
	return len(raw) > 0 && string(bytes.TrimSpace(raw)) == "null"
}

// ---- request bodies ----

type resourcesBody struct {
	VCPUs  *int64 `json:"vcpus"`
	Memory *int64 `json:"memory"`
}

type sourceBody struct {
	Type       *string `json:"type"`
	URL        *string `json:"url"`
	Depth      *int64  `json:"depth"`
	Revision   *string `json:"revision"`
	Username   *string `json:"username"`
	Password   *string `json:"password"`
	SnapshotID *string `json:"snapshotId"`
}

type keepLastBody struct {
	Count         *int64 `json:"count"`
	Expiration    *int64 `json:"expiration"`
	DeleteEvicted *bool  `json:"deleteEvicted"`
}

type mountBody struct {
	Drive *string `json:"drive"`
	Mode  *string `json:"mode"`
}

// createBody is the body of POST /v2|v3|v4/sandboxes and (minus source and
// runtime) of POST /v2|v3/sandboxes/{name}/fork.
type createBody struct {
	Name               *string           `json:"name"`
	ProjectID          *string           `json:"projectId"`
	Source             *sourceBody       `json:"source"`
	Runtime            *string           `json:"runtime"`
	Image              *string           `json:"image"`
	Architecture       *string           `json:"architecture"`
	Resources          *resourcesBody    `json:"resources"`
	Ports              []int64           `json:"ports"`
	Timeout            *int64            `json:"timeout"`
	Env                map[string]string `json:"env"`
	Persistent         *bool             `json:"persistent"`
	NetworkPolicy      json.RawMessage   `json:"networkPolicy"`
	NetworkID          *string           `json:"networkId"`
	Tags               map[string]string `json:"tags"`
	SnapshotExpiration *int64            `json:"snapshotExpiration"`
	KeepLastSnapshots  json.RawMessage   `json:"keepLastSnapshots"`
	Mounts             json.RawMessage   `json:"mounts"`
	Region             *string           `json:"region"`
	FailoverRegions    []string          `json:"failoverRegions"`
}

// updateBody is the body of PATCH /v2/sandboxes/{name}.
type updateBody struct {
	Resources          *resourcesBody    `json:"resources"`
	Runtime            *string           `json:"runtime"`
	Timeout            *int64            `json:"timeout"`
	Persistent         *bool             `json:"persistent"`
	SnapshotExpiration *int64            `json:"snapshotExpiration"`
	KeepLastSnapshots  json.RawMessage   `json:"keepLastSnapshots"`
	NetworkPolicy      json.RawMessage   `json:"networkPolicy"`
	Region             *string           `json:"region"`
	FailoverRegions    []string          `json:"failoverRegions"`
	Mounts             json.RawMessage   `json:"mounts"`
	NetworkID          json.RawMessage   `json:"networkId"`
	Env                map[string]string `json:"env"`
	Ports              []int64           `json:"ports"`
	CurrentSnapshotID  *string           `json:"currentSnapshotId"`
	Tags               map[string]string `json:"tags"`
}

type runCommandBody struct {
	Command     *string           `json:"command"`
	Args        []string          `json:"args"`
	Cwd         *string           `json:"cwd"`
	Env         map[string]string `json:"env"`
	Sudo        *bool             `json:"sudo"`
	Wait        *bool             `json:"wait"`
	Logs        *bool             `json:"logs"`
	Timeout     *int64            `json:"timeout"`
	AttachStdin *bool             `json:"attachStdin"`
}

type killBody struct {
	Signal *int `json:"signal"`
}

type stdinBody struct {
	Data   *string `json:"data"`
	Offset *int64  `json:"offset"`
	Close  *bool   `json:"close"`
}

type extendBody struct {
	Duration *int64 `json:"duration"`
}

type snapshotBody struct {
	Expiration *int64 `json:"expiration"`
}

type readBody struct {
	Path *string `json:"path"`
	Cwd  *string `json:"cwd"`
}

type mkdirBody struct {
	Path      *string `json:"path"`
	Cwd       *string `json:"cwd"`
	Recursive *bool   `json:"recursive"`
}

// ---- field validators ----

func (e *Emulator) checkName(name string) *apiError {
	if len(name) > maxNameLen {
		return invalid("name", "should NOT be longer than %d characters", maxNameLen)
	}
	if !namePattern.MatchString(name) {
		return invalid("name", "should match pattern \"^[a-zA-Z0-9_-]+$\"")
	}
	return nil
}

// checkResources validates resources against the plan; base is the vcpus
// count in effect when the body does not set one. It returns vcpus, memory.
func (e *Emulator) checkResources(r *resourcesBody, base int64) (int64, int64, *apiError) {
	vcpus := base
	if r != nil && r.VCPUs != nil {
		vcpus = *r.VCPUs
		if vcpus < 1 {
			return 0, 0, invalid("resources.vcpus", "should be >= 1")
		}
		if vcpus != 1 && vcpus%2 != 0 {
			return 0, 0, invalid("resources.vcpus", "must be 1 or an even number")
		}
		if vcpus > int64(e.plan.MaxVCPUs) {
			return 0, 0, invalid("resources.vcpus", "should be <= %d (the maximum on the %s plan)", e.plan.MaxVCPUs, e.plan.Name)
		}
	}
	memory := vcpus * memoryPerVCPU
	if r != nil && r.Memory != nil {
		if *r.Memory < memoryPerVCPU {
			return 0, 0, invalid("resources.memory", "should be >= %d", memoryPerVCPU)
		}
		if *r.Memory != memory {
			return 0, 0, invalid("resources.memory", "must equal `resources.vcpus` * %d (%d)", memoryPerVCPU, memory)
		}
	}
	return vcpus, memory, nil
}

func (e *Emulator) checkPorts(ports []int64) *apiError {
	if len(ports) > e.plan.MaxPorts {
		return invalid("ports", "should NOT have more than %d items", e.plan.MaxPorts)
	}
	seen := make(map[int64]int, len(ports))
	for i, p := range ports {
		if j, dup := seen[p]; dup {
			return invalid("ports", "should NOT have duplicate items (items ## %d and %d are identical)", i, j)
		}
		seen[p] = i
		field := fmt.Sprintf("ports[%d]", i)
		switch {
		case p < 1024:
			return invalid(field, "should be >= 1024")
		case p > 65535:
			return invalid(field, "should be <= 65535")
		case p == 23456:
			return invalid(field, "must not be 23456 (reserved)")
		}
	}
	return nil
}

func (e *Emulator) checkTimeout(field string, t int64) *apiError {
	if t < 1000 {
		return invalid(field, "should be >= 1000")
	}
	if max := durMs(e.plan.MaxSessionDuration); t > max {
		return invalid(field, "should be <= %d (the maximum session duration on the %s plan)", max, e.plan.Name)
	}
	return nil
}

func checkTags(tags map[string]string) *apiError {
	if len(tags) > maxTags {
		return invalid("tags", "should NOT have more than %d properties", maxTags)
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			return invalid("tags", "property names should NOT be shorter than 1 characters")
		}
		if len(tags[k]) > maxTagValueLen {
			return invalid("tags."+k, "should NOT be longer than %d characters", maxTagValueLen)
		}
	}
	return nil
}

func parseKeepLast(raw json.RawMessage) (*vercel.KeepLastSnapshots, *apiError) {
	var kb keepLastBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kb); err != nil {
		ae := jsonError(err)
		ae.message = strings.Replace(ae.message, "`", "`keepLastSnapshots.", 1)
		return nil, ae
	}
	if kb.Count == nil {
		return nil, invalid("keepLastSnapshots", "should have required property 'count'")
	}
	if *kb.Count < 1 {
		return nil, invalid("keepLastSnapshots.count", "should be >= 1")
	}
	if *kb.Count > 10 {
		return nil, invalid("keepLastSnapshots.count", "should be <= 10")
	}
	if kb.Expiration != nil && *kb.Expiration < 0 {
		return nil, invalid("keepLastSnapshots.expiration", "should be >= 0")
	}
	de := true
	if kb.DeleteEvicted != nil {
		de = *kb.DeleteEvicted
	}
	return &vercel.KeepLastSnapshots{Count: *kb.Count, Expiration: kb.Expiration, DeleteEvicted: &de}, nil
}

func checkRegion(field, r string) *apiError {
	if !slices.Contains(regions, r) {
		return invalid(field, "should be equal to one of the allowed values: %s", strings.Join(regions, ", "))
	}
	return nil
}

func checkFailover(f []string, region string) *apiError {
	if len(f) > len(regions) {
		return invalid("failoverRegions", "should NOT have more than %d items", len(regions))
	}
	seen := map[string]int{}
	for i, r := range f {
		if err := checkRegion(fmt.Sprintf("failoverRegions[%d]", i), r); err != nil {
			return err
		}
		if j, dup := seen[r]; dup {
			return invalid("failoverRegions", "should NOT have duplicate items (items ## %d and %d are identical)", i, j)
		}
		seen[r] = i
		if r == region {
			return badRequest("failoverRegions must not include the sandbox region: %s", region)
		}
	}
	return nil
}

// checkMounts validates mounts; the emulator has no drives, so any mount
// names a drive that does not exist (404).
func checkMounts(raw json.RawMessage) *apiError {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var m map[string]mountBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		ae := jsonError(err)
		ae.message = strings.Replace(ae.message, "`", "`mounts.", 1)
		return ae
	}
	if len(m) > 4 {
		return invalid("mounts", "should NOT have more than 4 properties")
	}
	paths := make([]string, 0, len(m))
	for p := range m {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		mb := m[p]
		if !strings.HasPrefix(p, "/") {
			return invalid("mounts", "property name %q must be an absolute path", p)
		}
		if mb.Drive == nil {
			return invalid("mounts."+p, "should have required property 'drive'")
		}
		if len(*mb.Drive) > 64 || !namePattern.MatchString(*mb.Drive) {
			return invalid("mounts."+p+".drive", "should match pattern \"^[a-zA-Z0-9_-]+$\" and be at most 64 characters")
		}
		if mb.Mode != nil && *mb.Mode != "snapshot" && *mb.Mode != "read-write" && *mb.Mode != "read-only" {
			return invalid("mounts."+p+".mode", "should be equal to one of the allowed values: snapshot, read-write")
		}
	}
	for i := range paths {
		for j := range paths {
			if i != j && strings.HasPrefix(paths[j], strings.TrimSuffix(paths[i], "/")+"/") {
				return invalid("mounts", "paths %q and %q overlap", paths[i], paths[j])
			}
		}
	}
	if len(paths) > 0 {
		return notFound("Drive %q not found.", *m[paths[0]].Drive)
	}
	return nil
}

func checkSource(s *sourceBody) (*vercel.Source, *apiError) {
	if s.Type == nil {
		return nil, invalid("source", "should have required property 'type'")
	}
	out := &vercel.Source{Type: *s.Type}
	only := func(allowed ...string) *apiError {
		present := map[string]bool{
			"url": s.URL != nil, "depth": s.Depth != nil, "revision": s.Revision != nil,
			"username": s.Username != nil, "password": s.Password != nil, "snapshotId": s.SnapshotID != nil,
		}
		for _, k := range []string{"url", "depth", "revision", "username", "password", "snapshotId"} {
			if present[k] && !slices.Contains(allowed, k) {
				return additionalProperty("source." + k)
			}
		}
		return nil
	}
	checkURL := func() *apiError {
		if s.URL == nil {
			return invalid("source", "should have required property 'url'")
		}
		// Absolute local paths are an emulator extension (local git repos).
		u, err := url.Parse(*s.URL)
		if err != nil || (u.Scheme == "" && !strings.HasPrefix(*s.URL, "/")) {
			return invalid("source.url", "should match format \"uri\"")
		}
		out.URL = *s.URL
		return nil
	}
	switch *s.Type {
	case vercel.SourceGit:
		if err := only("url", "depth", "revision", "username", "password"); err != nil {
			return nil, err
		}
		if err := checkURL(); err != nil {
			return nil, err
		}
		if s.Depth != nil {
			if *s.Depth < 1 {
				return nil, invalid("source.depth", "should be >= 1")
			}
			out.Depth = *s.Depth
		}
		if (s.Username == nil) != (s.Password == nil) {
			return nil, invalid("source", "`username` and `password` must be given together")
		}
		if s.Revision != nil {
			out.Revision = *s.Revision
		}
		if s.Username != nil {
			out.Username, out.Password = *s.Username, *s.Password
		}
	case vercel.SourceTarball:
		if err := only("url"); err != nil {
			return nil, err
		}
		if err := checkURL(); err != nil {
			return nil, err
		}
	case vercel.SourceSnapshot:
		if err := only("snapshotId"); err != nil {
			return nil, err
		}
		if s.SnapshotID == nil {
			return nil, invalid("source", "should have required property 'snapshotId'")
		}
		out.SnapshotID = *s.SnapshotID
	default:
		return nil, invalid("source.type", "should be equal to one of the allowed values: git, tarball, snapshot")
	}
	return out, nil
}

// routeKind says which create-like route a body came in on.
type routeKind int

const (
	routeCreateV2 routeKind = iota
	routeCreateV3
	routeCreateV4
	routeForkV2
	routeForkV3
)

// validateCreate checks a create or fork body (§9.12). For forks, base is
// the source sandbox whose values fill the fields the body does not set.
func (e *Emulator) validateCreate(b *createBody, kind routeKind, base *sandboxRec) *apiError {
	isFork := kind == routeForkV2 || kind == routeForkV3
	if isFork {
		if b.Source != nil {
			return additionalProperty("source")
		}
		if b.Runtime != nil {
			return additionalProperty("runtime")
		}
	}
	if b.Runtime != nil && kind != routeCreateV2 {
		return additionalProperty("runtime")
	}
	if b.Name != nil {
		if err := e.checkName(*b.Name); err != nil {
			return err
		}
	}
	if b.ProjectID != nil && *b.ProjectID == "" {
		return invalid("projectId", "should NOT be shorter than 1 characters")
	}
	if b.Runtime != nil && !slices.Contains(runtimes, *b.Runtime) {
		return invalid("runtime", "should be equal to one of the allowed values: %s", strings.Join(runtimes, ", "))
	}
	if b.Image != nil {
		if *b.Image == "" || len(*b.Image) > 255 {
			return invalid("image", "should be between 1 and 255 characters")
		}
		if b.Runtime != nil {
			return badRequest("Invalid request: `runtime` and `image` cannot be used together.")
		}
	}
	if b.Architecture != nil {
		if *b.Architecture != "amd64" && *b.Architecture != "arm64" {
			return invalid("architecture", "should be equal to one of the allowed values: amd64, arm64")
		}
		if *b.Architecture == "arm64" && b.Runtime != nil {
			return invalid("architecture", "arm64 is only available without `runtime`")
		}
	}
	if b.Source != nil {
		src, err := checkSource(b.Source)
		if err != nil {
			return err
		}
		if src.Type == vercel.SourceSnapshot && (b.Runtime != nil || b.Image != nil) {
			return badRequest("Invalid request: `source` of type snapshot cannot be combined with `runtime` or `image`.")
		}
	}
	baseVCPUs := int64(defaultVCPUs)
	if base != nil {
		baseVCPUs = base.vcpus
	}
	if _, _, err := e.checkResources(b.Resources, baseVCPUs); err != nil {
		return err
	}
	if err := e.checkPorts(b.Ports); err != nil {
		return err
	}
	if b.Timeout != nil {
		if err := e.checkTimeout("timeout", *b.Timeout); err != nil {
			return err
		}
	}
	if _, err := parsePolicy(b.NetworkPolicy); err != nil {
		return err
	}
	if b.NetworkID != nil && len(*b.NetworkID) > 255 {
		return invalid("networkId", "should NOT be longer than 255 characters")
	}
	if err := checkTags(b.Tags); err != nil {
		return err
	}
	if b.SnapshotExpiration != nil && *b.SnapshotExpiration < 0 {
		return invalid("snapshotExpiration", "should be >= 0")
	}
	if len(b.KeepLastSnapshots) > 0 && !isNull(b.KeepLastSnapshots) {
		if _, err := parseKeepLast(b.KeepLastSnapshots); err != nil {
			return err
		}
	}
	region := defaultRegion
	if base != nil {
		region = base.region
	}
	if b.Region != nil {
		if err := checkRegion("region", *b.Region); err != nil {
			return err
		}
		region = *b.Region
	}
	if err := checkFailover(b.FailoverRegions, region); err != nil {
		return err
	}
	return checkMounts(b.Mounts)
}

// validateUpdate checks a PATCH body against the sandbox it changes.
func (e *Emulator) validateUpdate(b *updateBody, sb *sandboxRec) *apiError {
	if b.Runtime != nil && !slices.Contains(runtimes, *b.Runtime) {
		return invalid("runtime", "should be equal to one of the allowed values: %s", strings.Join(runtimes, ", "))
	}
	if _, _, err := e.checkResources(b.Resources, sb.vcpus); err != nil {
		return err
	}
	if b.Timeout != nil {
		if err := e.checkTimeout("timeout", *b.Timeout); err != nil {
			return err
		}
	}
	if b.SnapshotExpiration != nil && *b.SnapshotExpiration < 0 {
		return invalid("snapshotExpiration", "should be >= 0")
	}
	if len(b.KeepLastSnapshots) > 0 && !isNull(b.KeepLastSnapshots) {
		if _, err := parseKeepLast(b.KeepLastSnapshots); err != nil {
			return err
		}
	}
	if _, err := parsePolicy(b.NetworkPolicy); err != nil {
		return err
	}
	region := sb.region
	if b.Region != nil {
		if err := checkRegion("region", *b.Region); err != nil {
			return err
		}
		region = *b.Region
	}
	failover := sb.failover
	if b.FailoverRegions != nil {
		failover = b.FailoverRegions
	}
	if err := checkFailover(failover, region); err != nil {
		return err
	}
	if err := checkMounts(b.Mounts); err != nil {
		return err
	}
	if len(b.NetworkID) > 0 && !isNull(b.NetworkID) {
		var id string
		if err := json.Unmarshal(b.NetworkID, &id); err != nil {
			return invalid("networkId", "should be string,null")
		}
		if len(id) > 255 {
			return invalid("networkId", "should NOT be longer than 255 characters")
		}
	}
	if b.Ports != nil {
		if err := e.checkPorts(b.Ports); err != nil {
			return err
		}
	}
	if b.CurrentSnapshotID != nil && len(*b.CurrentSnapshotID) > 128 {
		return invalid("currentSnapshotId", "should NOT be longer than 128 characters")
	}
	return checkTags(b.Tags)
}

func (e *Emulator) validateRunCommand(b *runCommandBody) *apiError {
	if b.Command == nil {
		return invalid("command", "is required: should have required property 'command'")
	}
	if *b.Command == "" {
		return invalid("command", "should NOT be shorter than 1 characters")
	}
	if b.Cwd != nil && *b.Cwd == "" {
		return invalid("cwd", "should NOT be shorter than 1 characters")
	}
	if b.Timeout != nil {
		if *b.Timeout < 100 {
			return invalid("timeout", "should be >= 100")
		}
		if *b.Timeout > 18_000_000 {
			return invalid("timeout", "should be <= 18000000")
		}
	}
	return nil
}

// ---- network policy ----

// policySpec is a stored network policy: the request as given, and the
// redacted response form computed from it.
type policySpec struct {
	raw  json.RawMessage
	resp vercel.NetworkPolicy
}

// response returns the §3.6 C form (nil policy = allow-all).
func (p *policySpec) response() *vercel.NetworkPolicy {
	if p == nil {
		return &vercel.NetworkPolicy{Mode: vercel.NetworkAllowAll}
	}
	r := p.resp
	return &r
}

type policyA struct {
	Mode           *string  `json:"mode"`
	AllowedDomains []string `json:"allowedDomains"`
	AllowedCIDRs   []string `json:"allowedCIDRs"`
	DeniedCIDRs    []string `json:"deniedCIDRs"`
	InjectionRules []struct {
		Domain  *string           `json:"domain"`
		Headers map[string]string `json:"headers"`
		Match   json.RawMessage   `json:"match"`
	} `json:"injectionRules"`
}

type policyB struct {
	Allow   json.RawMessage `json:"allow"`
	Subnets *struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	} `json:"subnets"`
}

type matcherBody struct {
	Exact      *string `json:"exact"`
	StartsWith *string `json:"startsWith"`
	Regex      *string `json:"regex"`
}

type kvMatcherBody struct {
	Key   *matcherBody `json:"key"`
	Value *matcherBody `json:"value"`
}

type matchBody struct {
	Path        *matcherBody    `json:"path"`
	Method      []string        `json:"method"`
	QueryString []kvMatcherBody `json:"queryString"`
	Headers     []kvMatcherBody `json:"headers"`
}

type ruleBody struct {
	Match     json.RawMessage `json:"match"`
	Transform []struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
	ForwardURL *string `json:"forwardURL"`
	Response   *struct {
		StatusCode  *int              `json:"statusCode"`
		Headers     map[string]string `json:"headers"`
		Body        *string           `json:"body"`
		ContentType *string           `json:"contentType"`
	} `json:"response"`
}

func strictInto(raw json.RawMessage, field string, dst any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		ae := jsonError(err)
		if strings.Contains(ae.message, "`") {
			ae.message = strings.Replace(ae.message, "`", "`"+field+".", 1)
		} else {
			ae.message = fmt.Sprintf("Invalid request: `%s` should be object.", field)
		}
		return ae
	}
	return nil
}

func checkMatch(raw json.RawMessage, field string) *apiError {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var m matchBody
	if err := strictInto(raw, field, &m); err != nil {
		return err
	}
	check := func(mb *matcherBody, f string) *apiError {
		if mb == nil {
			return nil
		}
		if mb.Regex != nil {
			if _, err := regexp.Compile(*mb.Regex); err != nil {
				return invalid(f+".regex", "is not a valid regular expression")
			}
		}
		return nil
	}
	if err := check(m.Path, field+".path"); err != nil {
		return err
	}
	for i, kv := range m.QueryString {
		if err := check(kv.Key, fmt.Sprintf("%s.queryString[%d].key", field, i)); err != nil {
			return err
		}
		if err := check(kv.Value, fmt.Sprintf("%s.queryString[%d].value", field, i)); err != nil {
			return err
		}
	}
	for i, kv := range m.Headers {
		if err := check(kv.Key, fmt.Sprintf("%s.headers[%d].key", field, i)); err != nil {
			return err
		}
		if err := check(kv.Value, fmt.Sprintf("%s.headers[%d].value", field, i)); err != nil {
			return err
		}
	}
	return nil
}

func checkCIDRs(field string, cidrs []string) *apiError {
	for i, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			if _, err2 := netip.ParseAddr(c); err2 != nil {
				return invalid(fmt.Sprintf("%s[%d]", field, i), "should be a CIDR range (got %q)", c)
			}
		}
	}
	return nil
}

func checkDomains(field string, domains []string) *apiError {
	for i, d := range domains {
		if d == "" || strings.ContainsAny(d, " /:") {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "should be a domain name (got %q)", d)
		}
	}
	return nil
}

func headerNames(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// parsePolicy validates a network policy in the mode form (§3.6 A) or the
// allow/subnets form (§3.6 B) and computes its response form (§3.6 C).
// A missing or null policy returns nil.
func parsePolicy(raw json.RawMessage) (*policySpec, *apiError) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, invalid("networkPolicy", "should be object")
	}
	_, hasMode := keys["mode"]
	_, hasAllow := keys["allow"]
	_, hasSubnets := keys["subnets"]
	spec := &policySpec{raw: append(json.RawMessage(nil), raw...)}
	if hasMode && (hasAllow || hasSubnets) {
		return nil, badRequest("Invalid request: `networkPolicy` must use either `mode` or `allow`/`subnets`, not both.")
	}
	if hasMode || (!hasAllow && !hasSubnets && len(keys) > 0) {
		var a policyA
		if err := strictInto(raw, "networkPolicy", &a); err != nil {
			return nil, err
		}
		if a.Mode == nil {
			return nil, invalid("networkPolicy", "should have required property 'mode'")
		}
		switch *a.Mode {
		case vercel.NetworkAllowAll, vercel.NetworkDenyAll:
			spec.resp = vercel.NetworkPolicy{Mode: *a.Mode}
			return spec, nil
		case vercel.NetworkCustom, "default-allow", "default-deny":
		default:
			return nil, invalid("networkPolicy.mode", "should be equal to one of the allowed values: allow-all, deny-all, custom, default-allow, default-deny")
		}
		if err := checkDomains("networkPolicy.allowedDomains", a.AllowedDomains); err != nil {
			return nil, err
		}
		if err := checkCIDRs("networkPolicy.allowedCIDRs", a.AllowedCIDRs); err != nil {
			return nil, err
		}
		if err := checkCIDRs("networkPolicy.deniedCIDRs", a.DeniedCIDRs); err != nil {
			return nil, err
		}
		resp := vercel.NetworkPolicy{Mode: vercel.NetworkCustom, AllowedDomains: a.AllowedDomains,
			AllowedCIDRs: a.AllowedCIDRs, DeniedCIDRs: a.DeniedCIDRs}
		for i, r := range a.InjectionRules {
			f := fmt.Sprintf("networkPolicy.injectionRules[%d]", i)
			if r.Domain == nil || *r.Domain == "" {
				return nil, invalid(f, "should have required property 'domain'")
			}
			if err := checkMatch(r.Match, f+".match"); err != nil {
				return nil, err
			}
			resp.InjectionRules = append(resp.InjectionRules, vercel.InjectionRule{
				Domain: *r.Domain, HeaderNames: headerNames(r.Headers), Match: r.Match})
		}
		spec.resp = resp
		return spec, nil
	}
	var b policyB
	if err := strictInto(raw, "networkPolicy", &b); err != nil {
		return nil, err
	}
	resp := vercel.NetworkPolicy{Mode: vercel.NetworkCustom}
	if len(b.Allow) > 0 && !isNull(b.Allow) {
		trimmed := bytes.TrimSpace(b.Allow)
		switch trimmed[0] {
		case '[':
			var list []string
			if err := json.Unmarshal(b.Allow, &list); err != nil {
				return nil, invalid("networkPolicy.allow", "should be array of strings or object")
			}
			if err := checkDomains("networkPolicy.allow", list); err != nil {
				return nil, err
			}
			resp.AllowedDomains = list
		case '{':
			var m map[string][]json.RawMessage
			if err := json.Unmarshal(b.Allow, &m); err != nil {
				return nil, invalid("networkPolicy.allow", "should be array of strings or object whose values are arrays of rules")
			}
			domains := make([]string, 0, len(m))
			for d := range m {
				domains = append(domains, d)
			}
			sort.Strings(domains)
			if err := checkDomains("networkPolicy.allow", domains); err != nil {
				return nil, err
			}
			resp.AllowedDomains = domains
			for _, d := range domains {
				for i, rr := range m[d] {
					f := fmt.Sprintf("networkPolicy.allow.%s[%d]", d, i)
					inj, fwd, err := checkRule(rr, f, d)
					if err != nil {
						return nil, err
					}
					if inj != nil {
						resp.InjectionRules = append(resp.InjectionRules, *inj)
					}
					if fwd != nil {
						resp.ForwardRules = append(resp.ForwardRules, *fwd)
					}
				}
			}
		default:
			return nil, invalid("networkPolicy.allow", "should be array of strings or object")
		}
	}
	if b.Subnets != nil {
		if err := checkCIDRs("networkPolicy.subnets.allow", b.Subnets.Allow); err != nil {
			return nil, err
		}
		if err := checkCIDRs("networkPolicy.subnets.deny", b.Subnets.Deny); err != nil {
			return nil, err
		}
		resp.AllowedCIDRs, resp.DeniedCIDRs = b.Subnets.Allow, b.Subnets.Deny
	}
	spec.resp = resp
	return spec, nil
}

var forbiddenResponseHeaders = []string{"connection", "content-length", "transfer-encoding"}

func checkRule(raw json.RawMessage, f, domain string) (*vercel.InjectionRule, *vercel.ForwardRule, *apiError) {
	var r ruleBody
	if err := strictInto(raw, f, &r); err != nil {
		return nil, nil, err
	}
	if err := checkMatch(r.Match, f+".match"); err != nil {
		return nil, nil, err
	}
	n := 0
	if r.Transform != nil {
		n++
	}
	if r.ForwardURL != nil {
		n++
	}
	if r.Response != nil {
		n++
	}
	if n != 1 {
		return nil, nil, invalid(f, "must have exactly one of `transform`, `forwardURL`, `response`")
	}
	switch {
	case r.Transform != nil:
		var names []string
		seen := map[string]bool{}
		for _, t := range r.Transform {
			for _, h := range headerNames(t.Headers) {
				if seen[strings.ToLower(h)] {
					return nil, nil, invalid(f+".transform", "has duplicate header name %q", h)
				}
				seen[strings.ToLower(h)] = true
				names = append(names, h)
			}
		}
		return &vercel.InjectionRule{Domain: domain, HeaderNames: names, Match: r.Match}, nil, nil
	case r.ForwardURL != nil:
		u, err := url.Parse(*r.ForwardURL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, nil, invalid(f+".forwardURL", "should match format \"uri\"")
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(*r.ForwardURL, "?") || strings.Contains(*r.ForwardURL, "#") {
			return nil, nil, invalid(f+".forwardURL", "must not contain credentials, a query or a fragment")
		}
		return nil, &vercel.ForwardRule{Domain: domain, ForwardURL: *r.ForwardURL, Match: r.Match}, nil
	default:
		resp := r.Response
		if resp.StatusCode == nil {
			return nil, nil, invalid(f+".response", "should have required property 'statusCode'")
		}
		if *resp.StatusCode < 200 || *resp.StatusCode > 599 {
			return nil, nil, invalid(f+".response.statusCode", "should be >= 200 and <= 599")
		}
		if resp.Body != nil {
			if resp.ContentType == nil {
				return nil, nil, invalid(f+".response", "`contentType` is required when `body` is set")
			}
			switch *resp.StatusCode {
			case 204, 205, 304:
				return nil, nil, invalid(f+".response.body", "must not be set for status %d", *resp.StatusCode)
			}
		}
		seen := map[string]bool{}
		for _, h := range headerNames(resp.Headers) {
			l := strings.ToLower(h)
			if slices.Contains(forbiddenResponseHeaders, l) {
				return nil, nil, invalid(f+".response.headers", "must not set %q", h)
			}
			if seen[l] {
				return nil, nil, invalid(f+".response.headers", "has duplicate header name %q", h)
			}
			seen[l] = true
		}
		return nil, nil, nil
	}
}
