package idem

// A Scheduler's wake marks: a reset, a resolve, a re-run request or a
// "run now" made anywhere (another process, another host) reaches the
// Schedulers that run the job within SchedulerWakePoll, through the
// store's wake marks (idemstore.Waker).

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemgo/idem/idemstore"
)

// SchedulerWakePoll is how often a running [Scheduler] reads its store's
// wake marks ([idemstore.Waker]): a job reset, resolved or re-run by hand,
// or asked to run now ([Wake]), in any process sharing the store, is
// looked at by every Scheduler running it within SchedulerWakePoll of the
// change (and a catch-up's time), not at its next due time. Each poll is
// one read of the store's index. It is measured on the wall clock, also
// under [WithClock].
const SchedulerWakePoll = 2 * time.Second

// Wake asks the Schedulers that run job, in every process sharing store,
// to look at it at once: a period of it that is due runs now (at their
// next poll, [SchedulerWakePoll]) rather than at the job's next due time,
// or its next recheck. Resolve and Rerun wake their jobs themselves. The
// store must implement [idemstore.Waker] (the SQLite ledger and the
// Postgres ledger do); another store is an error naming it.
func Wake(ctx context.Context, store Store, job string) error {
	w, err := storeAs[idemstore.Waker]("Wake", store)
	if err != nil {
		return err
	}
	return w.Wake(ctx, job)
}

// wakePoller reads the store's wake marks while a Scheduler runs.
type wakePoller struct {
	w    idemstore.Waker
	mark int64 // the last mark read; -1 if none could be read yet
	stop chan struct{}
	done chan struct{}
}

// startWakes starts reading the wake marks of s's store, if it has them,
// from the mark they stand at now: a mark written before Run is covered
// by the jobs' first looks. Called before the first looks.
func (s *Scheduler) startWakes(ctx context.Context) *wakePoller {
	w, err := storeAs[idemstore.Waker]("Scheduler.Run", s.store)
	if err != nil {
		return nil // the store has none: jobs are looked at when due
	}
	p := &wakePoller{w: w, mark: -1, stop: make(chan struct{}), done: make(chan struct{})}
	if _, next, err := w.Woken(ctx, 0); err == nil {
		p.mark = next
	} else {
		s.logWake(err)
	}
	return p
}

// run polls until stop is closed.
func (p *wakePoller) run(ctx context.Context, s *Scheduler) {
	defer close(p.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-p.done:
		}
	}()
	t := time.NewTicker(SchedulerWakePoll)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		jobs, next, err := p.w.Woken(ctx, max(p.mark, 0))
		if err != nil {
			if ctx.Err() == nil {
				s.logWake(err)
			}
			continue
		}
		// Before any mark was read, every job ever woken is looked at:
		// one look too many rather than one too few.
		p.mark = next
		s.wakeJobs(jobs)
	}
}

// halt stops the poller and waits for it.
func (p *wakePoller) halt() {
	if p != nil {
		close(p.stop)
		<-p.done
	}
}

func (s *Scheduler) logWake(err error) {
	if s.logger != nil {
		s.logger.LogAttrs(context.Background(), slog.LevelWarn, "idem: scheduler: reading the wake marks failed", slog.Any("error", err))
	}
}

// wakeJobs looks at the jobs named at once; a job whose catch-up runs is
// looked at again as soon as it returns (the change may be behind it).
func (s *Scheduler) wakeJobs(jobs []string) {
	if len(jobs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != schedRunning {
		return
	}
	now := s.clock.Now()
	for _, name := range jobs {
		j := s.byName[name]
		if j == nil {
			continue // another service's job
		}
		j.holder = "" // look, rather than probe the holder
		if j.catching {
			j.rewake = true
			continue
		}
		s.schedule(j, now)
	}
	s.wake()
}
