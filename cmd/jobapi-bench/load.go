package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"
)

// loadgen runs fn in n goroutines labelled as the load generator and waits for them.
func loadgen(ctx context.Context, n int, fn func(ctx context.Context, i int)) {
	var wg sync.WaitGroup
	pprof.Do(ctx, pprof.Labels(labelKey, "loadgen"), func(ctx context.Context) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(ctx, i)
			}()
		}
	})
	wg.Wait()
}

// maxErrors stops a scenario whose calls keep failing: the numbers would mean nothing.
const maxErrors = 50

func callErr(err error, code int) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("HTTP %d", code)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
