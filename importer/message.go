package importer

import (
	"encoding/json"
	"strings"
)

// MessageComplete is the message of a successful import, as CDI writes it.
const MessageComplete = "Import Complete"

// maxTerminationMessage is Kubernetes' limit for a termination message.
const maxTerminationMessage = 4096

// TerminationMessage is the one-line JSON result: CDI's importer fields
// (so a CDI controller can read it) plus what this engine adds.
type TerminationMessage struct {
	ScratchSpaceRequired bool              `json:"scratchSpaceRequired"`
	PreallocationApplied bool              `json:"preallocationApplied"`
	Labels               map[string]string `json:"labels,omitempty"`
	Message              string            `json:"message"`
	SourceFormat         string            `json:"sourceFormat,omitempty"`
	Compression          string            `json:"compression,omitempty"`
	VirtualSize          int64             `json:"virtualSize"`
	BytesWritten         int64             `json:"bytesWritten"`
	DataBytes            int64             `json:"dataBytes,omitempty"`
	BytesRead            int64             `json:"bytesRead"`
	Checksum             string            `json:"checksum,omitempty"`
	ScratchUsed          bool              `json:"scratchUsed"`
	DurationSeconds      float64           `json:"durationSeconds"`
	Retries              int               `json:"retries"`
	Verified             bool              `json:"verified,omitempty"`
	SourceDigest         string            `json:"sourceDigest,omitempty"`
	TargetDigest         string            `json:"targetDigest,omitempty"`
}

// TerminationMessage builds the result message for r and the import's
// error (nil on success).
func (r *Result) TerminationMessage(err error) TerminationMessage {
	m := TerminationMessage{
		PreallocationApplied: r.PreallocationApplied,
		Labels:               r.Labels,
		Message:              MessageComplete,
		SourceFormat:         r.SourceFormat,
		Compression:          strings.Join(r.Compressions, ","),
		VirtualSize:          r.VirtualSize,
		BytesWritten:         r.BytesWritten,
		DataBytes:            r.DataBytes,
		BytesRead:            r.BytesRead,
		Checksum:             strings.Join(r.Checksums, ","),
		ScratchUsed:          r.ScratchUsed,
		DurationSeconds:      float64(r.Duration.Milliseconds()) / 1000,
		Retries:              r.Retries,
		Verified:             r.Verified,
		SourceDigest:         r.SourceDigest,
		TargetDigest:         r.TargetDigest,
	}
	if err != nil {
		m.Message = "Unable to process data: " + err.Error()
		m.PreallocationApplied = false
	}
	return m
}

// JSON renders the message on one line of at most 4096 bytes, shortening
// the message text if it must.
func (m TerminationMessage) JSON() []byte {
	b, _ := json.Marshal(m)
	for len(b) > maxTerminationMessage && len(m.Message) > 0 {
		over := len(b) - maxTerminationMessage + len("…")
		m.Message = m.Message[:max(0, len(m.Message)-over)] + "…"
		b, _ = json.Marshal(m)
	}
	return b
}
