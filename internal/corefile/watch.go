package corefile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// DefaultDebounce covers one kubelet AtomicWriter update (a handful of syscalls in a few milliseconds) and stays
// well under the 300 ms target from the ..data rename to the first answer.
const DefaultDebounce = 50 * time.Millisecond

// maxWaitFactor bounds a debounce window: events keep pushing the re-read back by one debounce, but never beyond
// this many debounces after the first event, so a directory that never stops changing is still re-read.
const maxWaitFactor = 10

// Watcher reports changes to ConfigMap volume directories. Kubernetes updates such a volume by writing a new
// ..<timestamp> directory, pointing a ..data_tmp symlink at it and renaming that over ..data; the visible keys are
// symlinks (key -> ..data/key) that get no events of their own. So every event in a directory only means "maybe
// changed": after a short debounce the directory is re-read through its symlinks and its content hash compared
// (see dirHash). A directory that does not exist yet is picked up when it appears (its nearest existing ancestor
// is watched), and one deleted and recreated is watched again.
type Watcher struct {
	log      *zap.Logger
	dirs     []string
	debounce time.Duration
	fsw      *fsnotify.Watcher
	hashes   map[string]string
}

// NewWatcher starts watching dirs and records their current content. Create it before reading the
// directories for the first time: a change made in between is then reported by [Watcher.Run] instead of lost.
// debounce <= 0 means [DefaultDebounce].
func NewWatcher(log *zap.Logger, dirs []string, debounce time.Duration) (*Watcher, error) {
	if len(dirs) == 0 {
		return nil, errors.New("watch config directories: no directory given")
	}
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	w := &Watcher{log: log.Named("configwatch"), debounce: debounce, hashes: map[string]string{}}
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("watch config directory %q: %w", d, err)
		}
		if !slices.Contains(w.dirs, abs) {
			w.dirs = append(w.dirs, abs)
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch config directories: %w", err)
	}
	w.fsw = fsw
	w.ensureWatches()
	for _, d := range w.dirs {
		w.hashes[d] = w.hash(d)
	}
	w.log.Info("watching config directories", zap.Strings("dirs", w.dirs), zap.Duration("debounce", debounce))
	return w, nil
}

// Run calls onChange, from Run's goroutine, each time the content of at least one directory has changed, until
// ctx is done; then it releases the inotify watches and returns nil. Events arriving while onChange runs are
// handled after it returns. Call Run at most once.
func (w *Watcher) Run(ctx context.Context, onChange func()) error {
	defer w.fsw.Close()
	// A debounce window opens at the first event and closes once no event came for one debounce (at most
	// maxWaitFactor debounces after it opened); then the directories are re-read once.
	var (
		timer *time.Timer
		fire  <-chan time.Time // non-nil while a window is open
		limit time.Time
	)
	arm := func() {
		now := time.Now()
		if fire == nil {
			limit = now.Add(maxWaitFactor * w.debounce)
			timer = time.NewTimer(w.debounce)
			fire = timer.C
			return
		}
		timer.Reset(min(w.debounce, limit.Sub(now)))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return errors.New("watch config directories: event channel closed")
			}
			if w.relevant(ev.Name) {
				w.log.Debug("config event", zap.String("path", ev.Name), zap.Stringer("op", ev.Op))
				arm()
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return errors.New("watch config directories: error channel closed")
			}
			// Includes fsnotify.ErrEventOverflow: events were lost, so re-read everything.
			w.log.Warn("watch error, rechecking", zap.Error(err))
			arm()
		case <-fire:
			fire = nil
			if w.check() {
				onChange()
			}
		}
	}
}

// Close releases the watches of a Watcher whose Run was never called.
func (w *Watcher) Close() error { return w.fsw.Close() }

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
	h, err := dirHash(d)
	if err != nil {
		w.log.Warn("cannot read config directory", zap.String("dir", d), zap.Error(err))
		return "error: " + err.Error()
	}
	return h
}

// ensureWatches watches each directory and its parent (to see it deleted or replaced), or, while it does not
// exist, its nearest existing ancestor. Adding an existing watch is a no-op, and the kernel drops the watch of a
// deleted directory, so this is simply repeated on every check.
func (w *Watcher) ensureWatches() {
	for _, d := range w.dirs {
		for _, p := range watchTargets(d) {
			if err := w.fsw.Add(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				w.log.Warn("cannot watch path", zap.String("path", p), zap.Error(err))
			}
		}
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

// relevant reports whether an event path concerns a watched directory: an entry in it, the directory itself, or
// one of its ancestors (ancestors are watched for the directory's appearance, and see unrelated traffic too).
func (w *Watcher) relevant(name string) bool {
	name = filepath.Clean(name)
	for _, d := range w.dirs {
		if name == d || filepath.Dir(name) == d || strings.HasPrefix(d, name+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
