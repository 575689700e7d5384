package retry

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/diskimport/engine/internal/units"
)

// Told is a log attribute's value that a person can also read as one
// sentence: the command line on a terminal prints Sentence in place of a
// record that carries one (a Notice, a restart of the transfer).
type Told interface {
	slog.LogValuer
	Sentence() string
}

// Notice is one retry as its log record carries it: logged as the value of
// an attribute with an empty key (Notice.Attr), it gives the record its
// usual keys (Context's, then retry, maxRetries, delay, offset, cause),
// while a handler that knows the type (the command line's on a terminal)
// can tell it in one sentence instead (Sentence).
type Notice struct {
	Attempt
	// Failure says in words what failed, naming where: "Connection to
	// example.com dropped", "example.com answered 503 Service Unavailable".
	Failure string
	// Offset is how many bytes of the source were read when it failed
	// (the start of the range, for a range read); < 0: not told.
	Offset int64
	// Context are the record's attributes before the retry's own (url, or
	// image and digest).
	Context []slog.Attr
}

// Attr is the notice as a log attribute: its empty key inlines its
// attributes into the record.
func (n Notice) Attr() slog.Attr { return slog.Any("", n) }

// LogValue gives the record the notice's attributes.
func (n Notice) LogValue() slog.Value {
	attrs := append([]slog.Attr{}, n.Context...)
	attrs = append(attrs, slog.Int("retry", n.N), slog.Int("maxRetries", n.Max),
		slog.Duration("delay", n.Delay.Round(time.Millisecond)))
	if n.Offset >= 0 {
		attrs = append(attrs, slog.Int64("offset", n.Offset))
	}
	if n.Cause != nil {
		attrs = append(attrs, slog.String("cause", n.Cause.Error()))
	}
	return slog.GroupValue(attrs...)
}

// Sentence is the notice for a person: "Connection to example.com dropped
// at 1.2 GiB; retrying in 2 s (retry 1 of 10)".
func (n Notice) Sentence() string {
	s := n.Failure
	if n.Offset > 0 {
		s += " at " + units.Bytes(n.Offset)
	}
	return fmt.Sprintf("%s; retrying in %s (retry %d of %d)", s, seconds(n.Delay), n.N, n.Max)
}

// seconds renders a delay for a person: "0.9 s" under 10 s, "27 s" above.
func seconds(d time.Duration) string {
	s := d.Seconds()
	if s < 9.95 {
		return fmt.Sprintf("%.1f s", s)
	}
	return fmt.Sprintf("%.0f s", math.Round(s))
}
