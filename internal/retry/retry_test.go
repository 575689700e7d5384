package retry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/retry"
)

var errFlaky = errors.New("flaky")

// TestWaitCountsRetriesAcrossStreaks: every failure of one streak is a
// retry of the budget, a streak that made progress and failed again too,
// and the budget bounds them all.
func TestWaitCountsRetriesAcrossStreaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(retry.Policy{MaxRetries: 3, FirstDelay: time.Millisecond})
		var seen []retry.Attempt
		s := b.Streak(func(a retry.Attempt) { seen = append(seen, a) })
		ctx := context.Background()
		require.NoError(t, s.Wait(ctx, errFlaky, 0))
		require.NoError(t, s.Wait(ctx, errFlaky, 0))
		s.Reset()
		require.NoError(t, s.Wait(ctx, errFlaky, 0))
		time.Sleep(retry.OutageWindow + time.Second)
		err := b.Streak(nil).Wait(ctx, errFlaky, 0)
		require.ErrorIs(t, err, errFlaky)
		assert.Contains(t, err.Error(), "gave up after 3 retries")
		assert.Equal(t, 3, b.Used())
		require.Len(t, seen, 3)
		assert.Equal(t, 1, seen[0].N)
		assert.Equal(t, 3, seen[2].N)
		assert.Equal(t, 3, seen[2].Max)
		assert.Same(t, errFlaky, seen[0].Cause)
	})
}

// TestWaitCountsAnOutageOfManyConnectionsOnce: streaks that fail together
// (the connections of one source cut by one outage) cost the retries of
// the longest of them, not one each; streaks that fail more than
// OutageWindow apart are outages of their own. Before, sixteen connections
// cut twice spent 32 retries where one connection spent 2.
func TestWaitCountsAnOutageOfManyConnectionsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(retry.Policy{MaxRetries: 3, FirstDelay: time.Millisecond})
		ctx := context.Background()
		outage := func(failures ...int) {
			streaks := make([]*retry.Streak, len(failures))
			for i := range streaks {
				streaks[i] = b.Streak(nil)
			}
			for round := 1; ; round++ {
				failed := false
				for i, s := range streaks {
					if round <= failures[i] {
						require.NoError(t, s.Wait(ctx, errFlaky, 0))
						failed = true
					}
				}
				if !failed {
					return
				}
			}
		}
		outage(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
		assert.Equal(t, 1, b.Used(), "sixteen connections cut together")
		time.Sleep(retry.OutageWindow + time.Second)
		outage(1, 2, 1, 1)
		assert.Equal(t, 3, b.Used(), "a second outage, one connection failing twice in it")
		time.Sleep(retry.OutageWindow + time.Second)
		err := b.Streak(nil).Wait(ctx, errFlaky, 0)
		assert.ErrorContains(t, err, "gave up after 3 retries", "a third outage finds the budget spent")
	})
}

func TestWaitDelayDoublesWithJitterAndResets(t *testing.T) {
	b := retry.NewBudget(retry.Policy{MaxRetries: 100, FirstDelay: 8 * time.Millisecond, MaxDelay: 32 * time.Millisecond})
	var delays []time.Duration
	s := b.Streak(func(a retry.Attempt) { delays = append(delays, a.Delay) })
	ctx := context.Background()
	for range 4 {
		require.NoError(t, s.Wait(ctx, errFlaky, 0))
	}
	s.Reset()
	require.NoError(t, s.Wait(ctx, errFlaky, 0))
	bounds := []time.Duration{8, 16, 32, 32, 8} // ms: the delay before jitter
	require.Len(t, delays, len(bounds))
	for i, d := range delays {
		hi := bounds[i] * time.Millisecond
		assert.GreaterOrEqual(t, d, hi/2, i)
		assert.LessOrEqual(t, d, hi, i)
	}
}

// TestWaitHonoursRetryAfterUpToTheCap: the server's hint is slept, capped
// (in a bubble: exactly the cap).
func TestWaitHonoursRetryAfterUpToTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(retry.Policy{FirstDelay: time.Millisecond, MaxRetryAfter: 30 * time.Millisecond})
		var got time.Duration
		s := b.Streak(func(a retry.Attempt) { got = a.Delay })
		start := time.Now()
		require.NoError(t, s.Wait(context.Background(), errFlaky, time.Hour))
		assert.Equal(t, 30*time.Millisecond, got)
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
	})
}

func TestWaitGivesUpPastMaxElapsed(t *testing.T) {
	b := retry.NewBudget(retry.Policy{FirstDelay: 20 * time.Millisecond, MaxElapsed: 50 * time.Millisecond})
	s := b.Streak(nil)
	var err error
	for range 10 {
		if err = s.Wait(context.Background(), errFlaky, 0); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, errFlaky)
	assert.Contains(t, err.Error(), "gave up after retrying for")
}

func TestWaitClassificationAndDisabled(t *testing.T) {
	permanent := errors.New("permanent")
	b := retry.NewBudget(retry.Policy{FirstDelay: time.Millisecond, Retryable: func(err error) bool { return !errors.Is(err, permanent) }})
	s := b.Streak(nil)
	assert.Same(t, permanent, s.Wait(context.Background(), permanent, 0))
	require.NoError(t, s.Wait(context.Background(), errFlaky, 0))
	assert.Equal(t, 1, b.Used())

	off := retry.NewBudget(retry.Policy{MaxRetries: -1})
	assert.Same(t, errFlaky, off.Streak(nil).Wait(context.Background(), errFlaky, 0))
	assert.Equal(t, 0, off.Used())
	assert.Equal(t, -1, off.Max())
	assert.Equal(t, retry.DefaultMaxRetries, retry.NewBudget(retry.Policy{}).Max())
}

// TestWaitStopsWithContext: a cancel ends an hour's wait at once (in a
// bubble: at the cancel's instant, not a tick later).
func TestWaitStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(retry.Policy{FirstDelay: time.Hour, MaxElapsed: 2 * time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		err := b.Streak(nil).Wait(ctx, errFlaky, 0)
		assert.Equal(t, 20*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, errdefs.ErrCancelled)
		require.ErrorIs(t, err, context.Canceled)

		// Already cancelled: no retry is counted.
		err = b.Streak(nil).Wait(ctx, errFlaky, 0)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, b.Used())
	})
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	assert.Equal(t, 7*time.Second, retry.RetryAfter("7", now))
	assert.Equal(t, 90*time.Second, retry.RetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now))
	for _, v := range []string{"", "0", "-3", "soon", now.Add(-time.Minute).Format(http.TimeFormat)} {
		assert.Zero(t, retry.RetryAfter(v, now), v)
	}
	assert.Positive(t, retry.RetryAfter("99999999999999", now))
}
