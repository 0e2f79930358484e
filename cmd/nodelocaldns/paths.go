package main

import (
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// checkPaths checks, before anything starts, the files and directories the serving agent's flags name, so that a
// wrong path is one line naming the flag and the value (exit 2), as every other bad value is, rather than a
// start-up that fails later in the log. stat is os.Stat (it follows the symlinks a ConfigMap volume is made of).
func checkPaths(o *options.Options, stat func(string) (fs.FileInfo, error)) error {
	file := func(flag, path string) error {
		st, err := stat(path)
		switch {
		case err != nil:
			return fmt.Errorf("invalid value %q for flag -%s: %w", path, flag, err)
		case st.IsDir():
			return fmt.Errorf("invalid value %q for flag -%s: a directory, want a file", path, flag)
		}
		return nil
	}
	// dir: value is the flag's value, path the directory it needs (the value itself, or the one it is written in).
	dir := func(flag, value, path, what string) error {

		st, err := stat(path)
		switch {
		case err != nil:
			return fmt.Errorf("invalid value %q for flag -%s: %s: %w", value, flag, what, err)
		case !st.IsDir():
			return fmt.Errorf("invalid value %q for flag -%s: %s %s is not a directory", value, flag, what, path)
		}
		return nil
	}
	// parent: the file is written there, so its directory must exist (the file itself need not).
	parent := func(flag, path string) error {
		if path == "" {
			return nil
		}
		return dir(flag, path, filepath.Dir(path), "the directory it is written in")
	}
	if err := file("basecorefile", o.BaseCorefile); err != nil {
		return err
	}
	// -conf, or -corefile when -conf is not given: options.Parse put the one in use in o.Corefile.
	if err := parent(o.CorefileFlag, o.Corefile); err != nil {
		return err
	}
	// -kubednscm may be missing: the kube-dns ConfigMap's directory is watched and may appear after the start (the
	// manifests mount it optional). A file there is a mistake.
	if st, err := stat(o.KubeDNSConfigDir); o.KubeDNSConfigDir != "" && err == nil && !st.IsDir() {
		return fmt.Errorf("invalid value %q for flag -kubednscm: a file, want the kube-dns ConfigMap's directory", o.KubeDNSConfigDir)
	}
	if err := parent("health-socket", o.HealthSocket); err != nil {
		return err
	}
	return parent("pidfile", o.PIDFile)
}
