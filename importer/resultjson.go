package importer

import (
	"encoding/json"
	"strings"
)

// ResultJSON is a Result's numbers under the names and units the command
// line's --json prints them (durations in seconds, lists comma-joined);
// CDI's termination message carries the same fields after its own, so
// there is one copy of each name.
type ResultJSON struct {
	SourceFormat    string     `json:"sourceFormat,omitempty"`
	Compression     string     `json:"compression,omitempty"`
	VirtualSize     int64      `json:"virtualSize"`
	TargetSize      int64      `json:"targetSize,omitempty"`
	BytesWritten    int64      `json:"bytesWritten"`
	DataBytes       int64      `json:"dataBytes,omitempty"`
	BytesRead       int64      `json:"bytesRead"`
	Checksum        string     `json:"checksum,omitempty"`
	ScratchUsed     bool       `json:"scratchUsed"`
	ScratchBytes    int64      `json:"scratchBytes,omitempty"`
	DurationSeconds float64    `json:"durationSeconds"`
	Retries         int        `json:"retries"`
	Sandbox         string     `json:"sandbox,omitempty"`
	Verified        bool       `json:"verified,omitempty"`
	SourceDigest    string     `json:"sourceDigest,omitempty"`
	TargetDigest    string     `json:"targetDigest,omitempty"`
	ContentDigest   string     `json:"contentDigest,omitempty"`
	Delta           *DeltaPass `json:"delta,omitempty"`
	TargetState     string     `json:"targetState,omitempty"`
}

// JSONFields is r as ResultJSON.
func (r *Result) JSONFields() ResultJSON {
	return ResultJSON{
		SourceFormat:    r.SourceFormat,
		Compression:     strings.Join(r.Compressions, ","),
		VirtualSize:     r.VirtualSize,
		TargetSize:      r.TargetSize,
		BytesWritten:    r.BytesWritten,
		DataBytes:       r.DataBytes,
		BytesRead:       r.BytesRead,
		Checksum:        strings.Join(r.Checksums, ","),
		ScratchUsed:     r.ScratchUsed,
		ScratchBytes:    r.ScratchBytes,
		DurationSeconds: float64(r.Duration.Milliseconds()) / 1000,
		Retries:         r.Retries,
		Sandbox:         r.Sandbox,
		Verified:        r.Verified,
		SourceDigest:    r.SourceDigest,
		TargetDigest:    r.TargetDigest,
		ContentDigest:   r.ContentDigest,
		Delta:           r.Delta,
		TargetState:     r.TargetState,
	}
}

// MarshalJSON writes r as the command line's --json does (its result
// fields, and complete and target, which the command line's message says
// in words).
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Complete             bool              `json:"complete"`
		Target               string            `json:"target,omitempty"`
		PreallocationApplied bool              `json:"preallocationApplied"`
		Labels               map[string]string `json:"labels,omitempty"`
		ResultJSON
	}{r.Complete, r.Target, r.PreallocationApplied, r.Labels, r.JSONFields()})
}
