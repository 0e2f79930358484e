package configwatch

import "github.com/fsnotify/fsnotify"

// notifier is the part of an fsnotify.Watcher the Watcher uses, so that tests can make inotify fail the way an
// exhausted limit makes it fail, without lowering the host-wide limits.
type notifier interface {
	Add(path string) error
	Close() error
	events() <-chan fsnotify.Event
	errors() <-chan error
}

type fsnotifyWatcher struct{ *fsnotify.Watcher }

func newFsnotify() (notifier, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return fsnotifyWatcher{w}, nil
}

func (w fsnotifyWatcher) events() <-chan fsnotify.Event { return w.Events }
func (w fsnotifyWatcher) errors() <-chan error          { return w.Errors }
