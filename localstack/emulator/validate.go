package emulator

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// apiError is an error answer: a status and the body {"error": {"code", "message"}}.
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
// parameters the SDKs forward verbatim — are ignored, except those the
// emulator implements (knownPrivateParams). An empty body decodes
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
			if strings.HasPrefix(k, "__") && !knownPrivateParams[k] {
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

// knownPrivateParams are the "__*" body properties the emulator implements;
// request bodies declare them like any other field.
var knownPrivateParams = map[string]bool{"__interactive": true}

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
		field := te.Field
		for _, emb := range embeddedBodies {
			field = strings.TrimPrefix(field, emb)
		}
		return invalid(field, "should be %s", jsonTypeName(te.Type))
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

// checkedBody is a request body that validates itself once decoded (see
// reqCtx.decodeChecked).
type checkedBody interface{ check() *apiError }

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

func (b *runCommandBody) check() *apiError {
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

type killBody struct {
	Signal *int `json:"signal"`
}

func (b *killBody) check() *apiError {
	if b.Signal == nil {
		return invalid("signal", "is required: should have required property 'signal'")
	}
	if *b.Signal < 1 || *b.Signal > 64 {
		return invalid("signal", "should be a POSIX signal number between 1 and 64")
	}
	return nil
}

type stdinBody struct {
	Data   *string `json:"data"`
	Offset *int64  `json:"offset"`
	Close  *bool   `json:"close"`
}

func (b *stdinBody) check() *apiError {
	if b.Data != nil {
		if len(*b.Data) > 1_000_000 {
			return invalid("data", "should NOT be longer than 1000000 characters")
		}
		if _, err := base64.StdEncoding.DecodeString(*b.Data); err != nil {
			return invalid("data", "should be base64-encoded")
		}
	}
	if b.Offset != nil && *b.Offset < 0 {
		return invalid("offset", "should be >= 0")
	}
	return nil
}

type extendBody struct {
	Duration *int64 `json:"duration"`
}

func (b *extendBody) check() *apiError {
	if b.Duration == nil {
		return invalid("duration", "is required: should have required property 'duration'")
	}
	if *b.Duration < 1000 {
		return invalid("duration", "should be >= 1000")
	}
	return nil
}

type snapshotBody struct {
	Expiration *int64 `json:"expiration"`
}

func (b *snapshotBody) check() *apiError {
	if b.Expiration != nil && *b.Expiration < 0 {
		return invalid("expiration", "should be >= 0")
	}
	return nil
}

// fileBody is the body of fs/read and the part of fs/mkdir naming a path.
type fileBody struct {
	Path *string `json:"path"`
	Cwd  *string `json:"cwd"`
}

func (b *fileBody) check() *apiError {
	if b.Path == nil || *b.Path == "" {
		return invalid("path", "is required: should have required property 'path'")
	}
	return nil
}

// cwd is the working directory the path is relative to ("" = /vercel/sandbox).
func (b *fileBody) cwd() string {
	if b.Cwd == nil {
		return ""
	}
	return *b.Cwd
}

type mkdirBody struct {
	fileBody
	Recursive *bool `json:"recursive"`
}
