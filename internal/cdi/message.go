package cdi

import (
	"encoding/json"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/diskimport/engine/importer"
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
	// LabelsOmitted counts the labels left out so that the message fits
	// Kubernetes' 4096-byte limit (see JSON).
	LabelsOmitted int    `json:"labelsOmitted,omitempty"`
	Message       string `json:"message"`
	// Reason names the failure's kind, one stable word per sentinel
	// (Reason); HTTPStatus is the status code of a refused HTTP request.
	Reason     string `json:"reason,omitempty"`
	HTTPStatus int    `json:"httpStatus,omitempty"`
	// The result's numbers, as the command line's --json and
	// importer.Result's JSON name them.
	importer.ResultJSON
}

// NewTerminationMessage builds the result message for r and the import's
// error (nil on success). A nil r stands for an import that failed before
// it produced a result.
func NewTerminationMessage(r *importer.Result, err error) TerminationMessage {
	if r == nil {
		r = &importer.Result{}
	}
	m := TerminationMessage{
		PreallocationApplied: r.PreallocationApplied,
		Labels:               r.Labels,
		Message:              MessageComplete,
		ResultJSON:           r.JSONFields(),
		Reason:               Reason(err),
		HTTPStatus:           HTTPStatus(err),
	}
	switch {
	case err == nil:
	case Classify(err) == ScratchSpaceRequired:
		// What CDI's controller acts on; it shows a fixed text of its own.
		m.ScratchSpaceRequired = true
		m.PreallocationApplied = false
		m.Message = "Scratch space required: " + err.Error()
	default:
		m.Message = processFailedPrefix + err.Error()
		m.PreallocationApplied = false
	}
	return m
}

// CLIMessage is the result JSON a command-line run prints: the
// termination message's fields with the failure in the user's words
// (CDI's "Unable to process data: " is for its controller, in env mode).
func CLIMessage(r *importer.Result, err error) TerminationMessage {
	m := NewTerminationMessage(r, err)
	if err != nil {
		m.Message = err.Error()
	}
	return m
}

// JSON renders the message on one line of at most 4096 bytes (Kubernetes
// truncates a longer termination message, and a CDI controller then cannot
// parse it). When it does not fit, the cause comes first: the message text
// is shortened only as far as it must be for the other fields, and labels
// are then added in key order while they fit; the ones left out are counted
// in labelsOmitted, so a reader knows the set is incomplete.
func (m TerminationMessage) JSON() []byte {
	if b := marshalMessage(m); len(b) <= maxTerminationMessage {
		return b
	}
	labels := m.Labels
	m.Labels = nil
	// Reserve room for the largest count we could report; the final count is
	// never larger, so it never needs more digits.
	m.LabelsOmitted = len(labels)
	m.Message = fitMessageText(m, maxTerminationMessage)
	b := marshalMessage(m)
	kept := fitLabels(labels, maxTerminationMessage-len(b))
	if len(kept) > 0 {
		m.Labels = kept
		m.LabelsOmitted = len(labels) - len(kept)
		if b2 := marshalMessage(m); len(b2) <= maxTerminationMessage {
			return b2
		}
		// Defensive: our size arithmetic disagrees with encoding/json; keep
		// the cause rather than the labels.
		m.Labels = nil
		m.LabelsOmitted = len(labels)
		b = marshalMessage(m)
	}
	if len(b) <= maxTerminationMessage {
		return b
	}
	// Only fields no import fills this large are left (say, thousands of
	// --checksum values): report the cause alone.
	minimal := TerminationMessage{Message: m.Message, LabelsOmitted: m.LabelsOmitted, Reason: m.Reason, HTTPStatus: m.HTTPStatus}
	minimal.Message = fitMessageText(minimal, maxTerminationMessage)
	return marshalMessage(minimal)
}

// ellipsis marks shortened message text.
const ellipsis = "…"

func marshalMessage(m TerminationMessage) []byte {
	// A struct of strings, numbers and a string map cannot fail to marshal.
	b, _ := json.Marshal(m)
	return b
}

// fitMessageText returns the longest prefix of m.Message (cut on a rune
// boundary, ellipsis appended when cut) with which m marshals to at most
// limit bytes; "" when not even the ellipsis fits.
func fitMessageText(m TerminationMessage, limit int) string {
	text := m.Message
	if len(marshalMessage(m)) <= limit {
		return text
	}
	fits := func(n int) bool {
		m.Message = text[:runeStart(text, n)] + ellipsis
		return len(marshalMessage(m)) <= limit
	}
	if !fits(0) {
		return ""
	}
	// JSON output is at least as long as the text it encodes, so no prefix
	// longer than limit can fit: search below that, whatever the size of the
	// original error. fits is monotone, and fits(lo) always holds.
	lo, hi := 0, min(len(text), limit)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return text[:runeStart(text, lo)] + ellipsis
}

// runeStart moves i back to the start of the UTF-8 sequence it falls in,
// so a cut never leaves half a character (which json.Marshal would turn
// into U+FFFD, three bytes for one).
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// fitLabels returns the labels, taken in key order, whose JSON object
// together with its `"labels":…,` framing takes at most budget bytes.
// Labels that do not fit are skipped, and later (smaller) ones may still be
// taken, so the result depends only on the labels, never on map order.
func fitLabels(labels map[string]string, budget int) map[string]string {
	const framing = len(`"labels":{},`)
	used := framing
	if used > budget {
		return nil
	}
	kept := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		entry := jsonStringLen(k) + 1 + jsonStringLen(labels[k]) // "k":"v"
		if len(kept) > 0 {
			entry++ // the comma before it
		}
		if used+entry > budget {
			continue
		}
		used += entry
		kept[k] = labels[k]
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// jsonStringLen is the length of s encoded as a JSON string, quotes
// included, exactly as json.Marshal writes it.
func jsonStringLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}
