package uploadserver

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// defaultStallTimeout is the stall timeout when the import template sets
// none: the same default as importer.Options.StallTimeout.
const defaultStallTimeout = 5 * time.Minute

// stallGuard fails a read of the request body that receives nothing for
// the stall timeout. Without it a client that stops sending (but keeps the
// connection open) holds the server's only upload slot forever. It moves
// the connection's read deadline before every read, so only time spent
// waiting for the client counts, never time the engine spends writing.
type stallGuard struct {
	rc      *http.ResponseController
	timeout time.Duration
	armed   bool // the connection supports read deadlines
}

func newStallGuard(w http.ResponseWriter, timeout time.Duration) *stallGuard {
	if timeout <= 0 {
		timeout = defaultStallTimeout
	}
	return &stallGuard{rc: http.NewResponseController(w), timeout: timeout, armed: true}
}

// arm starts the clock for the next read. A connection that cannot take a
// deadline (not a net/http server connection) is left without one.
func (g *stallGuard) arm() {
	if !g.armed {
		return
	}
	if err := g.rc.SetReadDeadline(time.Now().Add(g.timeout)); err != nil {
		g.armed = false
	}
}

// disarm clears the deadline, so nothing of this upload outlives it on a
// connection net/http may reuse.
func (g *stallGuard) disarm() {
	if g.armed {
		_ = g.rc.SetReadDeadline(time.Time{})
	}
}

// explain names a deadline expiry as the stall it is.
func (g *stallGuard) explain(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("no data received from the upload client for %s: %w", g.timeout, errdefs.ErrSourceUnreachable)
	}
	return err
}
