package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/diskimport/engine/internal/retry"
)

// retrySentences is the import's log handler on a terminal at the default
// verbosity: a record that carries a retry.Told (a source's retry, a
// transfer started over) is written as its one sentence, "Connection to example.com
// dropped at 1.2 GiB; retrying in 2.0 s (retry 1 of 10)", for the person
// watching the bar (w prints it above the bar); every other record goes
// to next. Off a terminal, with -v, --json or --log-format json, the
// record stays structured.
type retrySentences struct {
	next slog.Handler
	w    io.Writer
}

func (h retrySentences) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h retrySentences) Handle(ctx context.Context, r slog.Record) error {
	if n, ok := retryNotice(r); ok {
		_, err := fmt.Fprintln(h.w, n.Sentence())
		return err
	}
	return h.next.Handle(ctx, r)
}

func (h retrySentences) WithAttrs(as []slog.Attr) slog.Handler {
	return retrySentences{next: h.next.WithAttrs(as), w: h.w}
}

func (h retrySentences) WithGroup(name string) slog.Handler {
	return retrySentences{next: h.next.WithGroup(name), w: h.w}
}

// retryNotice is the sentence r carries (a retry.Notice, a restart), if any.
func retryNotice(r slog.Record) (n retry.Told, found bool) {
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindLogValuer {
			n, found = a.Value.Any().(retry.Told)
		}
		return !found
	})
	return n, found
}
