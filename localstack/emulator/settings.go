package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// This file is the configuration of a named sandbox as requests set it: the
// bodies of create, fork and update, their validation, and how they change a
// sandbox. The settings all three share are one struct, checked and applied
// by one function each.

// sandboxSettings are the fields create, fork and update bodies share: the
// configuration of the sandbox's future sessions.
type sandboxSettings struct {
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
	Env                map[string]string `json:"env"`
	Ports              []int64           `json:"ports"`
	Tags               map[string]string `json:"tags"`
}

// createBody is the body of POST /v2|v3|v4/sandboxes and (minus source and
// runtime) of POST /v2|v3/sandboxes/{name}/fork.
type createBody struct {
	Name         *string     `json:"name"`
	ProjectID    *string     `json:"projectId"`
	Source       *sourceBody `json:"source"`
	Image        *string     `json:"image"`
	Architecture *string     `json:"architecture"`
	NetworkID    *string     `json:"networkId"`
	// Interactive is the SDK's private parameter `__interactive` (the CLI sets
	// it): the sandbox's sessions serve interactive shells (interactive.go).
	Interactive *bool `json:"__interactive"`
	sandboxSettings
}

// updateBody is the body of PATCH /v2/sandboxes/{name}.
type updateBody struct {
	sandboxSettings
	NetworkID         json.RawMessage `json:"networkId"` // null clears it
	CurrentSnapshotID *string         `json:"currentSnapshotId"`
}

// embeddedBodies are the Go names of the structs embedded in request bodies.
// encoding/json puts them in the field path of a type error; the API's field
// names have no such level.
var embeddedBodies = []string{"sandboxSettings.", "fileBody."}

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

// routeKind says which create-like route a body came in on.
type routeKind int

const (
	routeCreateV2 routeKind = iota
	routeCreateV3
	routeCreateV4
	routeForkV2
	routeForkV3
)

// validateCreate checks a create or fork body. For forks, base is the source
// sandbox whose values fill the fields the body does not set.
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
	if err := checkRuntime(b.Runtime); err != nil {
		return err
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
	if b.NetworkID != nil && len(*b.NetworkID) > 255 {
		return invalid("networkId", "should NOT be longer than 255 characters")
	}
	if base == nil {
		base = &sandboxRec{vcpus: defaultVCPUs, region: defaultRegion}
	}
	// A fork does not inherit the source's failover regions for this check.
	return e.checkSettings(&b.sandboxSettings, base.vcpus, base.region, nil)
}

// validateUpdate checks a PATCH body against the sandbox it changes.
func (e *Emulator) validateUpdate(b *updateBody, sb *sandboxRec) *apiError {
	if err := checkRuntime(b.Runtime); err != nil {
		return err
	}
	if err := e.checkSettings(&b.sandboxSettings, sb.vcpus, sb.region, sb.failover); err != nil {
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
	if b.CurrentSnapshotID != nil && len(*b.CurrentSnapshotID) > 128 {
		return invalid("currentSnapshotId", "should NOT be longer than 128 characters")
	}
	return nil
}

// checkSettings validates the shared settings against the plan. vcpus, region
// and failover are the values in effect where the body does not set them.
func (e *Emulator) checkSettings(s *sandboxSettings, vcpus int64, region string, failover []string) *apiError {
	if _, _, err := e.checkResources(s.Resources, vcpus); err != nil {
		return err
	}
	if err := e.checkPorts(s.Ports); err != nil {
		return err
	}
	if s.Timeout != nil {
		if err := e.checkTimeout("timeout", *s.Timeout); err != nil {
			return err
		}
	}
	if _, err := parsePolicy(s.NetworkPolicy); err != nil {
		return err
	}
	if err := checkTags(s.Tags); err != nil {
		return err
	}
	if s.SnapshotExpiration != nil && *s.SnapshotExpiration < 0 {
		return invalid("snapshotExpiration", "should be >= 0")
	}
	if len(s.KeepLastSnapshots) > 0 && !isNull(s.KeepLastSnapshots) {
		if _, err := parseKeepLast(s.KeepLastSnapshots); err != nil {
			return err
		}
	}
	if s.Region != nil {
		if err := checkRegion("region", *s.Region); err != nil {
			return err
		}
		region = *s.Region
	}
	if s.FailoverRegions != nil {
		failover = s.FailoverRegions
	}
	if err := checkFailover(failover, region); err != nil {
		return err
	}
	return checkMounts(s.Mounts)
}

// applySettings applies validated settings to sb. A null networkPolicy is
// left alone here (a fork keeps its source's); a null keepLastSnapshots
// clears it.
func (e *Emulator) applySettings(sb *sandboxRec, s *sandboxSettings) {
	if s.Resources != nil {
		sb.vcpus, sb.memory, _ = e.checkResources(s.Resources, sb.vcpus)
	}
	if s.Runtime != nil {
		sb.runtime = *s.Runtime
	}
	if s.Timeout != nil {
		sb.timeout = *s.Timeout
	}
	if s.Persistent != nil {
		sb.persistent = *s.Persistent
	}
	if s.SnapshotExpiration != nil {
		v := *s.SnapshotExpiration
		sb.snapExp = &v
	}
	if isNull(s.KeepLastSnapshots) {
		sb.keepLast = nil
	} else if len(s.KeepLastSnapshots) > 0 {
		sb.keepLast, _ = parseKeepLast(s.KeepLastSnapshots)
	}
	if len(s.NetworkPolicy) > 0 && !isNull(s.NetworkPolicy) {
		sb.policy, _ = parsePolicy(s.NetworkPolicy)
	}
	if s.Region != nil {
		sb.region = *s.Region
	}
	if s.FailoverRegions != nil {
		sb.failover = slices.Clone(s.FailoverRegions)
		if len(sb.failover) == 0 {
			sb.failover = nil
		}
	}
	if s.Env != nil {
		sb.env = s.Env
	}
	if s.Ports != nil {
		sb.ports = slices.Clone(s.Ports)
	}
	if s.Tags != nil {
		sb.tags = maps.Clone(s.Tags)
		if len(sb.tags) == 0 {
			sb.tags = nil
		}
	}
}

// configFromBody applies a validated create/fork body to sb (which holds the
// defaults, or the fork source's copied configuration).
func (e *Emulator) configFromBody(sb *sandboxRec, b *createBody, kind routeKind) {
	e.applySettings(sb, &b.sandboxSettings)
	if b.Image != nil {
		sb.image = pinImage(*b.Image)
		sb.runtime = ""
	}
	if b.Architecture != nil {
		sb.architecture = *b.Architecture
	}
	if b.NetworkID != nil {
		sb.networkID = *b.NetworkID
	}
	sb.interactive = b.Interactive != nil && *b.Interactive
	// /v4 create and /v3 fork: snapshots expire after 7 days and persistent
	// sandboxes keep only their latest snapshot unless told otherwise.
	if kind == routeCreateV4 || kind == routeForkV3 {
		if sb.snapExp == nil {
			v := sevenDaysMs
			sb.snapExp = &v
		}
		if sb.persistent && sb.keepLast == nil && !isNull(b.KeepLastSnapshots) {
			t := true
			sb.keepLast = &vercel.KeepLastSnapshots{Count: 1, DeleteEvicted: &t}
		}
	}
}

// updateFromBody applies a validated PATCH body to sb at now.
func (e *Emulator) updateFromBody(sb *sandboxRec, b *updateBody, now int64) {
	e.applySettings(sb, &b.sandboxSettings)
	if isNull(b.NetworkPolicy) {
		sb.policy = nil // back to the default, allow-all
	}
	if len(b.KeepLastSnapshots) > 0 && !isNull(b.KeepLastSnapshots) {
		e.applyKeepLastLocked(sb, now)
	}
	if isNull(b.NetworkID) {
		sb.networkID = ""
	} else if len(b.NetworkID) > 0 {
		_ = json.Unmarshal(b.NetworkID, &sb.networkID)
	}
	if b.CurrentSnapshotID != nil {
		sb.currentSnapshotID = *b.CurrentSnapshotID
	}
	sb.updatedAt = now
}

// checkRuntime checks a runtime name.
func checkRuntime(rt *string) *apiError {
	if rt != nil && !slices.Contains(runtimes, *rt) {
		return invalid("runtime", "should be equal to one of the allowed values: %s", strings.Join(runtimes, ", "))
	}
	return nil
}

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
