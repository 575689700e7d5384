package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/errtable"
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
	case Classify(err) == errtable.ScratchSpaceRequired:
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

// Texts CDI's importer writes as the whole termination message of a failed
// run; the controller shows them as the DataVolume's condition message and
// matches some of their words (simplifyKnownMessage).
const (
	processFailedPrefix = "Unable to process data: "
	blankFailedPrefix   = "Unable to create blank image: "
	// MessageBlankArchive is CDI's refusal of IMPORTER_SOURCE=none with
	// IMPORTER_CONTENTTYPE=archive: a blank disk has no archive form.
	MessageBlankArchive = "Cannot create empty disk with content type archive"
)

// plainFailure marks an error whose text is the whole termination message,
// with no "Unable to process data" in front: CDI writes its environment
// refusals ("Unknown data source: x") and the node-pull timeout that way.
// text, when set, replaces err's own text (CDI's fixed sentences).
type plainFailure struct {
	text string
	err  error
}

func (p *plainFailure) Error() string {
	if p.text != "" {
		return p.text
	}
	return p.err.Error()
}

func (p *plainFailure) Unwrap() error { return p.err }

// asPlain marks err (nil stays nil).
func asPlain(err error) error {
	if err == nil {
		return nil
	}
	return &plainFailure{err: err}
}

// FailureText is the plain-text termination message of a run that exits
// non-zero: what CDI's importer writes there, and the first thing a person
// sees in `kubectl describe`. It is one line of at most 4096 bytes; a
// longer one is cut at its end, so the cause, which comes first, stays.
func FailureText(kind Kind, err error) string {
	text := err.Error()
	var plain *plainFailure
	var status *errdefs.HTTPStatusError
	if errors.As(err, &status) {
		text = strings.Replace(text, status.Error(), httpStatusText(status), 1)
	}
	switch {
	case errors.As(err, &plain):
	case kind == Blank:
		text = blankFailedPrefix + text
	default:
		text = processFailedPrefix + text
	}
	return oneLine(text)
}

// uploadServerFailedPrefix is what CDI's upload server logs last before it
// exits 1 (cmd/cdi-uploadserver: "UploadServer failed: %s"); it writes no
// termination message then, so its pod's FallbackToLogsOnError shows that
// line.
const uploadServerFailedPrefix = "UploadServer failed: "

// UploadServerSucceeded is the last line CDI's upload server logs after it
// wrote its termination message and before it exits 0.
const UploadServerSucceeded = "UploadServer successfully exited"

// UploadServerFailureText is the plain-text ending of an upload-server pod
// that exits 1: CDI's last log line, which its controller shows, as one
// line of at most 4096 bytes.
func UploadServerFailureText(err error) string {
	return oneLine(uploadServerFailedPrefix + err.Error())
}

// oneLine is text as a termination message: Kubernetes keeps the message,
// CDI keeps one line of it, cut at its end past 4096 bytes.
func oneLine(text string) string {
	text = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text)
	return cutText(text, maxTerminationMessage)
}

// httpStatusText is CDI's importer's sentence for a refused HTTP request,
// whose words ("expected status code 200, got 404") CDI's controller
// shows; it takes the place of the user's words in the failure's text.
func httpStatusText(e *errdefs.HTTPStatusError) string {
	return fmt.Sprintf("expected status code 200, got %d. Status: %s (GET %s)", e.StatusCode, e.Status, e.URL)
}

// cutText shortens s to at most limit bytes on a rune boundary, marking the
// cut with an ellipsis.
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return s[:runeStart(s, limit-len(ellipsis))] + ellipsis
}

// Classify returns the class of an import's error, from the engine's one
// table of errors (internal/errtable). An error may wrap several of the
// engine's sentinels (a cancelled upload server wraps the last attempt's
// cause); the first in the table's order with a class wins, so a checksum
// mismatch stays one whatever else it is wrapped in.
func Classify(err error) errtable.Class { return errtable.Classify(err) }

// ReasonFailed is the reason of an error that wraps none of the sentinels.
const ReasonFailed = importer.ReasonFailed

// Reason is importer.Reason: the word the result's "reason" field holds.
func Reason(err error) string { return importer.Reason(err) }

// HTTPStatus is the status code of the HTTP answer that failed the import,
// or 0 when no HTTP status is involved.
func HTTPStatus(err error) int {
	var se *errdefs.HTTPStatusError
	if errors.As(err, &se) {
		return se.StatusCode
	}
	return 0
}

// Exit codes of the importer binary.
const (
	ExitOK     = 0
	ExitFailed = 1
	// ExitUsage is the command line's "you asked wrongly"; the environment
	// contract never uses it, as CDI's controller only tells 0 from non-zero.
	ExitUsage = 2
)

// ExitCode is the exit code under CDI's contract. Like CDI's importer, two
// failures exit 0 so that the controller reads the JSON termination
// message instead of letting the kubelet restart the same pod: a checksum
// mismatch (the controller fails the import for good rather than download
// the same wrong bytes again) and scratch space required (the controller
// creates a scratch volume and recreates the pod with it).
func ExitCode(err error) int {
	switch Classify(err) {
	case errtable.Succeeded, errtable.ChecksumMismatch, errtable.ScratchSpaceRequired:
		return ExitOK
	}
	return ExitFailed
}

// CLIExitCode is the exit code of a command-line run: 2 when the options
// were wrong (fix the command and retry), 1 for any other failure.
func CLIExitCode(err error) int {
	switch Classify(err) {
	case errtable.Succeeded:
		return ExitOK
	case errtable.InvalidOptions:
		return ExitUsage
	}
	return ExitFailed
}

// Report ends a run under CDI's contract: it writes the termination message
// for res and err to paths.TerminationLog and returns the exit code. kind
// is what the run was asked to do (it names a blank disk's failure as CDI
// does). A success whose message cannot be written is a failure (exit 1),
// since the controller learns the result only from that file; writeErr
// says why, for the log.
func Report(paths Paths, kind Kind, res *importer.Result, err error) (code int, writeErr error) {
	code = ExitCode(err)
	writeErr = writeTerminationLog(paths.TerminationLog, TerminationLog(kind, res, err))
	if writeErr != nil && err == nil {
		return ExitFailed, writeErr
	}
	return code, writeErr
}

// TerminationLog is what the termination log holds after a run. CDI's
// controller parses JSON only from a pod that exited 0 (success, scratch
// space required, checksum mismatch); after a non-zero exit it shows the
// text as it is, so a failure is written as plain text (FailureText).
func TerminationLog(kind Kind, res *importer.Result, err error) []byte {
	if ExitCode(err) == ExitOK {
		return NewTerminationMessage(res, err).JSON()
	}
	return []byte(FailureText(kind, err))
}

// writeTerminationLog writes msg as the whole file, creating its directory
// (under IMPORTER_PATH_PREFIX, /dev may not exist yet).
func writeTerminationLog(path string, msg []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, msg, 0o600)
}
