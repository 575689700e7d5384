package importer

import "github.com/diskimport/engine/internal/errtable"

// ReasonFailed is the reason of an error that wraps none of the sentinels
// (errtable.ReasonFailed, the table's word).
const ReasonFailed = "Failed"

// Reason returns the stable word naming err's kind ("" for nil), the
// "reason" of the command line's JSON and of CDI's termination message:
// one word per sentinel of package errdefs, for scripts that branch on the
// kind of failure without parsing the message. The first sentinel err
// wraps in the engine's one table of errors names it (a checksum mismatch
// stays one whatever wraps it; the finer sentinels of one class come
// before the class's broader ones), so a cancelled import that failed for
// a reason of its own (a timeout while a refused connection was being
// retried) is named by that reason.
func Reason(err error) string { return errtable.Reason(err) }
