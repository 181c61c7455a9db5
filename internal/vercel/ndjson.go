package vercel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Record is one decoded NDJSON record of a command stream
// (docs/dev/vercel-sandbox-api.md §3.8): either a command status (Command set)
// or a chunk of output (Stream is "stdout" or "stderr", Data an arbitrary
// chunk, not necessarily a whole line). In-band errors are not records: Next
// returns them as *StreamError.
type Record struct {
	Command *Command
	Stream  string
	Data    string
}

// Output stream names.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	streamError  = "error"
)

// maxNDJSONLine bounds one record. The server's chunk size is not published
// (docs/dev/vercel-sandbox-api.md §9b); 16 MiB is far above any sensible chunk
// and keeps a runaway line from exhausting memory.
const maxNDJSONLine = 16 << 20

var errLineTooLong = errors.New("NDJSON record longer than 16 MiB")

// ndjsonDecoder reads records line by line, skipping blank lines
// (docs/dev/vercel-sandbox-api.md §9b) and record kinds it does not know (the
// API may add some).
type ndjsonDecoder struct {
	r        *bufio.Reader
	endpoint string
	maxLine  int
	err      error // sticky read error, io.EOF at the end
}

func newNDJSONDecoder(r io.Reader, endpoint string) *ndjsonDecoder {
	return &ndjsonDecoder{r: bufio.NewReaderSize(r, 64<<10), endpoint: endpoint, maxLine: maxNDJSONLine}
}

// next returns the next record. Errors: io.EOF at a clean end, *StreamError
// for an in-band error record, *ProtocolError for a malformed line, and the
// underlying read error otherwise.
func (d *ndjsonDecoder) next() (Record, error) {
	for {
		line, err := d.readLine()
		if line = bytes.TrimSpace(line); len(line) > 0 {
			rec, ok, derr := d.decode(line)
			if derr != nil {
				d.err = derr
				return Record{}, derr
			}
			if ok {
				return rec, nil
			}
		}
		if err != nil {
			return Record{}, err
		}
	}
}

// readLine returns one line without its newline. A final line without a
// newline is returned with a nil error; the next call reports the end.
func (d *ndjsonDecoder) readLine() ([]byte, error) {
	if d.err != nil {
		return nil, d.err
	}
	var line []byte
	for {
		chunk, err := d.r.ReadSlice('\n')
		if len(line)+len(chunk) > d.maxLine {
			d.err = &ProtocolError{Endpoint: d.endpoint, Message: "read stream", Err: errLineTooLong}
			return nil, d.err
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			d.err = err
			if len(line) > 0 {
				return line, nil
			}
			return nil, err
		}
	}
}

func (d *ndjsonDecoder) decode(line []byte) (Record, bool, error) {
	var sr StreamRecord
	if err := json.Unmarshal(line, &sr); err != nil {
		return Record{}, false, &ProtocolError{Endpoint: d.endpoint, Message: "malformed NDJSON record", Err: err}
	}
	if sr.Command != nil {
		return Record{Command: sr.Command}, true, nil
	}
	switch sr.Stream {
	case StreamStdout, StreamStderr:
		var s string
		if len(sr.Data) > 0 && string(sr.Data) != "null" {
			if err := json.Unmarshal(sr.Data, &s); err != nil {
				return Record{}, false, &ProtocolError{Endpoint: d.endpoint, Message: "log record data is not a string", Err: err}
			}
		}
		return Record{Stream: sr.Stream, Data: s}, true, nil
	case streamError:
		return Record{}, false, decodeStreamError(sr.Data)
	}
	return Record{}, false, nil
}

func decodeStreamError(data json.RawMessage) *StreamError {
	var body ErrorBody
	if json.Unmarshal(data, &body) == nil && (body.Code != "" || body.Message != "") {
		if body.Code == "" {
			body.Code = "stream_error"
		}
		return &StreamError{Code: body.Code, Message: body.Message}
	}
	var s string
	if json.Unmarshal(data, &s) == nil {
		return &StreamError{Code: "stream_error", Message: s}
	}
	return &StreamError{Code: "stream_error", Message: fmt.Sprintf("undecodable error record %.200s", data)}
}
