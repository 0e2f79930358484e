// Package configwatch reports changes to ConfigMap volume directories (the node-local-dns and kube-dns
// ConfigMaps) the way Kubernetes performs them: a new timestamped directory and an atomic rename of the ..data
// symlink. It is the effectful side of the Corefile: internal/corefile renders, this package watches.
//
// Kubernetes updates such a volume by writing a new ..<timestamp> directory, pointing a ..data_tmp symlink at it
// and renaming that over ..data; the visible keys are symlinks (key -> ..data/key) that get no events of their
// own. So an inotify event in a directory only means "maybe changed": the directory is re-read through its key
// symlinks and its content hash compared (see dirHash), and only a real change is reported. Nothing here
// debounces: the caller's runner (the supervisor's reload runner, a channel of one) coalesces the reports, and
// the ..data rename makes each update visible at once, so there is no half-written state to wait out. Events
// already queued when the watcher wakes are taken together and answered by one re-read.
//
// When inotify is unavailable (its per-user limits fs.inotify.max_user_instances or max_user_watches are
// exhausted, which a busy node reaches), the watcher does not fail: it warns once, sets the polling gauge to 1
// and re-reads the directories every PollInterval instead, as node-cache always did.
//
// May touch: the ConfigMap volumes' files, read-only (inotify).
package configwatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// DefaultPollInterval is the re-read period without inotify: node-cache's ConfigMap poll period.
const DefaultPollInterval = 10 * time.Second

// Gauge is the part of a Prometheus gauge the watcher sets.
type Gauge interface{ Set(float64) }

// Config configures a Watcher.
type Config struct {
	Log  *zap.Logger
	Dirs []string
	// Keys names, for a directory of Dirs, the only entries of it that matter: the ConfigMap keys its reader
	// uses, or the files of a plain directory. Only their events (and the kubelet's ..data swap) wake the
	// watcher, and only they are hashed, so a log file written into the directory costs nothing. A directory
	// not in Keys: every entry matters.
	Keys map[string][]string
	// Polling, if set, is 1 while the watcher re-reads periodically because inotify is unavailable, else 0.
	Polling Gauge
	// PollInterval is the re-read period without inotify; <= 0 means DefaultPollInterval.
	PollInterval time.Duration

	// newNotifier opens the inotify instance; nil means fsnotify. Tests inject its failures.
	newNotifier func() (notifier, error)
}

// Watcher reports changes to ConfigMap volume directories. A directory that does not exist yet is picked up
// when it appears (its nearest existing ancestor is watched), and one deleted and recreated is watched again.
type Watcher struct {
	log     *zap.Logger
	dirs    []string
	keys    map[string][]string // absolute dir -> the entries that matter; absent: all
	hashes  map[string]string
	fsw     notifier // nil while polling only
	polling Gauge
	poll    time.Duration
	ticker  *time.Ticker // non-nil once degraded to polling
}

// New starts watching the directories and records their current content. Create it before reading the
// directories for the first time: a change made in between is then reported by [Watcher.Run] instead of lost.
// Only an empty or unusable directory list is an error; inotify failing degrades to polling.
func New(cfg Config) (*Watcher, error) {
	if len(cfg.Dirs) == 0 {
		return nil, errors.New("watch config directories: no directory given")
	}
	w := &Watcher{log: cfg.Log.Named("configwatch"), keys: map[string][]string{}, hashes: map[string]string{},
		polling: cfg.Polling, poll: cfg.PollInterval}
	if w.poll <= 0 {
		w.poll = DefaultPollInterval
	}
	for _, d := range cfg.Dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("watch config directory %q: %w", d, err)
		}
		if !slices.Contains(w.dirs, abs) {
			w.dirs = append(w.dirs, abs)
		}
		if keys, ok := cfg.Keys[d]; ok {
			w.keys[abs] = append(w.keys[abs], keys...)
		}
	}
	newNotifier := cfg.newNotifier
	if newNotifier == nil {
		newNotifier = newFsnotify
	}
	w.setPolling(0)
	if fsw, err := newNotifier(); err != nil {
		w.degrade("inotify_init", err)
	} else {
		w.fsw = fsw
		w.ensureWatches()
	}
	for _, d := range w.dirs {
		w.hashes[d] = w.hash(d)
	}
	w.log.Info("watching config directories", zap.Strings("dirs", w.dirs), zap.Bool("polling", w.ticker != nil))
	return w, nil
}

// Run calls onChange, from Run's goroutine, each time the content of at least one directory has changed, until
// ctx is done; then it releases the inotify watches and returns nil. Events arriving while onChange runs are
// handled after it returns. Call Run at most once.
func (w *Watcher) Run(ctx context.Context, onChange func()) error {
	defer w.Close()
	for {
		recheck, err := w.wait(ctx)
		if err != nil || ctx.Err() != nil {
			return err
		}
		if recheck && w.check() {
			onChange()
		}
	}
}

// wait blocks until something may have changed (an event, a watch error, a poll tick) or ctx is done, then takes
// the events already queued without waiting: one re-read answers them all.
func (w *Watcher) wait(ctx context.Context) (recheck bool, err error) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fsw != nil {
		events, errs = w.fsw.events(), w.fsw.errors()
	}
	var tick <-chan time.Time
	if w.ticker != nil {
		tick = w.ticker.C
	}
	select {
	case <-ctx.Done():
		return false, nil
	case ev, ok := <-events:
		recheck, err = w.onEvent(ev, ok)
	case e, ok := <-errs:
		recheck, err = w.onError(e, ok)
	case <-tick:
		recheck = true
	}
	for err == nil {
		var r bool
		select {
		case ev, ok := <-events:
			r, err = w.onEvent(ev, ok)
		case e, ok := <-errs:
			r, err = w.onError(e, ok)
		default:
			return recheck, nil
		}
		recheck = recheck || r
	}
	return false, err
}

func (w *Watcher) onEvent(ev fsnotify.Event, ok bool) (recheck bool, err error) {
	if !ok {
		return false, errors.New("watch config directories: event channel closed")
	}
	if !w.relevant(ev.Name) {
		return false, nil
	}
	w.log.Debug("config event", zap.String("path", ev.Name), zap.Stringer("op", ev.Op))
	return true, nil
}

func (w *Watcher) onError(err error, ok bool) (recheck bool, _ error) {
	if !ok {
		return false, errors.New("watch config directories: error channel closed")
	}
	// Includes fsnotify.ErrEventOverflow: events were lost, so re-read everything.
	w.log.Warn("watch error, rechecking", zap.Error(err))
	return true, nil
}

// Close releases the watches; Run calls it on return.
func (w *Watcher) Close() error {
	if w.ticker != nil {
		w.ticker.Stop()
	}
	if w.fsw == nil {
		return nil
	}
	return w.fsw.Close()
}

// check re-establishes watches, then re-hashes every directory and reports whether any changed. Watches come
// first so that a write racing with the hash either is seen by it or produces an event.
func (w *Watcher) check() bool {
	w.ensureWatches()
	changed := false
	for _, d := range w.dirs {
		if h := w.hash(d); h != w.hashes[d] {
			w.log.Info("config directory changed", zap.String("dir", d))
			w.hashes[d] = h
			changed = true
		}
	}
	w.log.Debug("config directories checked", zap.Bool("changed", changed))
	return changed
}

// hash digests d; a read error becomes part of the digest, so a lasting error is reported once, and its end too.
func (w *Watcher) hash(d string) string {
	keys, ok := w.keys[d]
	if !ok {
		keys = nil // every key
	} else if keys == nil {
		keys = []string{}
	}
	h, err := dirHash(d, keys)
	if err != nil {
		w.log.Warn("cannot read config directory", zap.String("dir", d), zap.Error(err))
		return "error: " + err.Error()
	}
	return h
}

// ensureWatches watches each directory and its parent (to see it deleted or replaced), or, while it does not
// exist, its nearest existing ancestor. Adding an existing watch is a no-op, and the kernel drops the watch of a
// deleted directory, so this is simply repeated on every check. A watch refused for lack of inotify resources
// adds the periodic re-read; the events of the watches that exist keep coming.
//
// An ancestor's watch sees only what is created after it is in place: a directory made below the ancestor in
// between (a volume's directories made in one MkdirAll) sent no event, and whatever is then written inside it
// is unwatched. So after watching an ancestor the targets are looked at again, down the path, until they stop
// moving (at most watchSettle times; the next event starts over).
func (w *Watcher) ensureWatches() {
	if w.fsw == nil {
		return
	}
	for _, d := range w.dirs {
		last := ""
		for range watchSettle {
			targets := watchTargets(d)
			if len(targets) == 0 || targets[0] == last {
				break
			}
			for _, p := range targets {
				w.add(p)
			}
			last = targets[0]
		}
	}
}

// watchSettle bounds ensureWatches' passes over one directory's path: its depth below the nearest existing
// ancestor, with room for a directory deleted meanwhile.
const watchSettle = 16

func (w *Watcher) add(p string) {
	err := w.fsw.Add(p)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
	case exhausted(err):
		w.degrade("inotify_add_watch "+p, err)
	default:
		w.log.Warn("cannot watch path", zap.String("path", p), zap.Error(err))
	}
}

// exhausted reports the errors of an inotify limit: EMFILE (max_user_instances, or the process's open files),
// ENFILE (the system's open files), ENOSPC (max_user_watches) and ENOMEM.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOMEM)
}

// degrade starts the periodic re-read, once, saying why.
func (w *Watcher) degrade(op string, err error) {
	if w.ticker != nil {
		return
	}
	hint := ""
	if exhausted(err) {
		hint = "raise fs.inotify.max_user_instances / max_user_watches on the node"
	}
	w.log.Warn("inotify unavailable; re-reading the config directories periodically instead",
		zap.String("op", op), zap.Error(err), zap.Duration("interval", w.poll), zap.String("hint", hint))
	w.ticker = time.NewTicker(w.poll)
	w.setPolling(1)
}

func (w *Watcher) setPolling(v float64) {
	if w.polling != nil {
		w.polling.Set(v)
	}
}

func watchTargets(dir string) []string {
	if isDir(dir) {
		return []string{dir, filepath.Dir(dir)}
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if isDir(p) {
			return []string{p}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// relevant reports whether an event path concerns a watched directory: an entry of it that matters (see
// Config.Keys), the directory itself, or one of its ancestors (ancestors are watched for the directory's
// appearance, and see unrelated traffic too).
func (w *Watcher) relevant(name string) bool {
	name = filepath.Clean(name)
	for _, d := range w.dirs {
		if name == d || strings.HasPrefix(d, name+string(filepath.Separator)) {
			return true
		}
		if filepath.Dir(name) == d && w.matters(d, filepath.Base(name)) {
			return true
		}
	}
	return false
}

// kubeletSwap is the symlink the kubelet renames into place on every update of a ConfigMap volume.
const kubeletSwap = "..data"

// matters says whether the entry base of directory d is one its reader uses.
func (w *Watcher) matters(d, base string) bool {
	keys, ok := w.keys[d]
	return !ok || base == kubeletSwap || slices.Contains(keys, base)
}
