package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/diskimport/engine/internal/retry"
)

// A source keeps one Budget for its whole life and a Streak per stream.
func Example() {
	budget := retry.NewBudget(retry.Policy{MaxRetries: 2, FirstDelay: time.Millisecond})
	streak := budget.Streak(func(a retry.Attempt) { fmt.Printf("retry %d of %d: %v\n", a.N, a.Max, a.Cause) })
	tries := 0
	fetch := func() error {
		tries++
		if tries < 3 {
			return errors.New("connection reset")
		}
		return nil
	}
	for {
		err := fetch()
		if err == nil {
			break
		}
		if err := streak.Wait(context.Background(), err, 0); err != nil {
			fmt.Println("giving up:", err)
			return
		}
	}
	fmt.Println("fetched after", budget.Used(), "retries")
	// Output:
	// retry 1 of 2: connection reset
	// retry 2 of 2: connection reset
	// fetched after 2 retries
}
