package uploadserver

import (
	"context"
	"errors"
	"time"
)

// errDeadline refuses an upload that arrives after the deadline.
var errDeadline = errors.New("the upload deadline has passed; the server accepts no more uploads")

// closeAtDeadline refuses every new upload and waits, as CDI's upload
// server does, for the one in progress (and a background import) to end,
// so a transfer that started in time is not cut off.
func (h *Handler) closeAtDeadline(ctx context.Context) {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	tick := time.NewTicker(deadlinePoll)
	defer tick.Stop()
	for {
		h.mu.Lock()
		busy := h.busy
		h.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	h.wg.Wait()
}
