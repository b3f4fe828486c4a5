package groupkey

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ErrNoHome is returned by Watch for a keyring built in memory: it has no
// secret files to watch.
var ErrNoHome = errors.New("the keyring has no secret files")

// Watch reports changes to the group's secret directory: the channel
// receives a value (coalesced, never blocking the watcher) after any file
// in it is created, written, renamed, removed or changed in mode, and once
// at the start, so a file written between Load and Watch is not missed.
// An overflow of the kernel's event queue, or any other watcher error,
// is reported as a change too: the caller reloads and loses nothing. The
// channel is closed when ctx ends or the watch can no longer report (the
// directory itself removed or moved away); a caller then falls back to
// polling.
//
// A rotation or a join publishes its file by link or rename into this
// directory (secretfile.WriteNew), one event for the complete file.
func (k *Keyring) Watch(ctx context.Context) (<-chan struct{}, error) {
	if k.home == "" {
		return nil, ErrNoHome
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch the group secrets: %w", err)
	}
	dir := Dir(k.home, k.name)
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch the group secrets in %s: %w", dir, err)
	}
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	notify := func() {
		select {
		case ch <- struct{}{}:
		default: // a change is already waiting to be read
		}
	}
	go func() {
		defer close(ch)
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				notify()
				if ev.Name == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					return // the directory is gone: nothing more will be reported
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				notify() // an overflow or read error: events may be lost
			}
		}
	}()
	return ch, nil
}

// NextExpiry is the first instant at which an epoch still accepted stops
// being accepted (just after the next epoch's creation plus the grace, as
// Accepts counts it), and false if none will: only the newest epoch is
// held, or every older one has already expired. Sessions proven with such
// an epoch must end then.
func (k *Keyring) NextExpiry() (time.Time, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	now := k.now()
	var next time.Time
	for i := 0; i+1 < len(k.epochs); i++ {
		until := k.epochs[i+1].created.Add(k.grace)
		if now.After(until) {
			continue // expired already
		}
		if at := until.Add(time.Nanosecond); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero()
}
