// Package retry is the engine's one backoff mechanism: a Policy (how many
// retries, how long to wait, which errors are worth another try), a Budget
// that counts the retries of one source across every stream it opens, and a
// Streak that paces one run of consecutive failures.
//
// The split mirrors what a transfer needs: the retry count bounds the whole
// life of a source (a server that keeps dropping cannot loop forever), while
// the delay and the elapsed-time bound restart whenever bytes flow again.
//
// A source read over several connections at once (parallel ranges) fails
// on all of them when its server or link has one outage. The budget counts
// the outage, not the connections: streaks that begin within OutageWindow
// of one another are one outage, charged as many retries as the longest of
// them takes, so sixteen connections cut together cost what one connection
// cut once costs (they cost 16 retries, and two brief outages failed an
// import that one connection completed with 2).
package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// Defaults for the zero fields of a Policy.
const (
	DefaultMaxRetries    = 10
	DefaultFirstDelay    = time.Second
	DefaultMaxDelay      = 30 * time.Second
	DefaultMaxElapsed    = 5 * time.Minute
	DefaultMaxRetryAfter = time.Minute
	// OutageWindow: streaks of a budget whose first failures lie this close
	// to the first failure of another streak's outage are that outage.
	// Connections cut by one reset or one stall see it within milliseconds;
	// the window bounds how often a server that cuts connections one at a
	// time can go uncounted.
	OutageWindow = time.Second
)

// Policy says whether and when a failed operation is tried again. The zero
// value retries every error up to DefaultMaxRetries times.
type Policy struct {
	// MaxRetries bounds the retries of a Budget: 0 means DefaultMaxRetries,
	// < 0 never retries.
	MaxRetries int
	// FirstDelay is the delay before the first retry of a streak; it
	// doubles with each failure in a row up to MaxDelay. The delay slept is
	// drawn from [delay/2, delay] so that many clients failing together do
	// not come back in lockstep.
	FirstDelay time.Duration
	MaxDelay   time.Duration
	// MaxElapsed bounds one streak, from its first failure: no retry whose
	// sleep would end past it is started.
	MaxElapsed time.Duration
	// MaxRetryAfter caps the server's Retry-After hint passed to Wait.
	MaxRetryAfter time.Duration
	// Retryable classifies a failure: false makes Wait give up at once
	// with the error unchanged. nil treats every error as retryable.
	Retryable func(error) bool
}

func (p Policy) withDefaults() Policy {
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	if p.FirstDelay <= 0 {
		p.FirstDelay = DefaultFirstDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = DefaultMaxElapsed
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	return p
}

// Budget is the retry allowance of one source, shared by all its streaks
// (every stream and concurrent reader it opens). It is safe for concurrent
// use.
type Budget struct {
	policy Policy
	used   atomic.Int64

	mu     sync.Mutex
	outage time.Time // the first failure of the outage being counted
	owner  *Streak   // the streak that began it
	depth  int       // the most failures in a row of any streak in it
}

// NewBudget returns a budget for p, its zero fields set to the defaults.
func NewBudget(p Policy) *Budget { return &Budget{policy: p.withDefaults()} }

// Used reports how many retries were granted so far.
func (b *Budget) Used() int { return int(b.used.Load()) }

// Max reports the number of retries allowed (< 0: none).
func (b *Budget) Max() int { return b.policy.MaxRetries }

// Attempt describes a retry about to be slept for, for logging.
type Attempt struct {
	N     int           // this retry's number in the budget, from 1
	Max   int           // the budget's bound
	Delay time.Duration // the sleep before it
	Cause error         // the failure being retried
}

// Streak paces one run of consecutive failures. It is not safe for
// concurrent use: each stream or read keeps its own.
type Streak struct {
	budget *Budget
	notify func(Attempt)
	start  time.Time // zero: no failure since the last Reset
	delay  time.Duration
	fails  int // failures since the last Reset
}

// Streak starts a streak on b. notify, when not nil, is called before each
// sleep (to log the retry).
func (b *Budget) Streak(notify func(Attempt)) *Streak {
	return &Streak{budget: b, notify: notify}
}

// Reset ends the streak: the operation made progress, so the next failure
// starts again from the first delay and a fresh elapsed-time bound.
func (s *Streak) Reset() { s.start = time.Time{} }

// Wait decides whether cause may be retried and, if so, counts the retry in
// the budget and sleeps the backoff (at least hint, a server's Retry-After,
// capped by the policy). It returns nil to try again; cause itself when the
// policy's classification refuses it or retries are disabled; cause with
// the reason for giving up when the budget or the streak's time is spent;
// and an error matching errdefs.ErrCancelled and ctx's error when ctx ends
// first.
func (s *Streak) Wait(ctx context.Context, cause error, hint time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	p := s.budget.policy
	if p.MaxRetries < 0 || (p.Retryable != nil && !p.Retryable(cause)) {
		return cause
	}
	now := time.Now()
	if s.start.IsZero() {
		s.start, s.delay, s.fails = now, p.FirstDelay, 0
	}
	d := s.delay/2 + rand.N(s.delay/2+1)
	d = max(d, min(hint, p.MaxRetryAfter))
	if elapsed := now.Sub(s.start); elapsed+d > p.MaxElapsed {
		if done := s.budget.Used(); done >= p.MaxRetries {
			return fmt.Errorf("%w (gave up after %d retries)", cause, done)
		}
		return fmt.Errorf("%w (gave up after retrying for %s)", cause, elapsed.Round(time.Millisecond))
	}
	n, ok := s.budget.charge(s)
	if !ok {
		return fmt.Errorf("%w (gave up after %d retries)", cause, n)
	}
	s.delay = min(s.delay*2, p.MaxDelay)
	if s.notify != nil {
		s.notify(Attempt{N: n, Max: p.MaxRetries, Delay: d, Cause: cause})
	}
	return Sleep(ctx, d)
}

// charge counts s's next failure: a retry of the budget unless another
// streak's failures of the same outage already paid for it. It returns the
// retry's number, or false with the count when the budget is spent.
func (b *Budget) charge(s *Streak) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sameOutage := b.owner != nil && b.owner != s && s.start.Sub(b.outage).Abs() <= OutageWindow
	if !sameOutage && (b.owner != s || !s.start.Equal(b.outage)) {
		b.outage, b.owner, b.depth = s.start, s, 0
	}
	used := int(b.used.Load())
	if s.fails < b.depth {
		s.fails++
		return used, true
	}
	if used >= b.policy.MaxRetries {
		return used, false
	}
	s.fails++
	b.depth = s.fails
	return int(b.used.Add(1)), true
}

// Sleep waits for d or until ctx ends, whichever comes first; the latter
// returns an error matching errdefs.ErrCancelled and ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}
