package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ConfigMapVolume writes a directory the way the kubelet's AtomicWriter updates a ConfigMap volume: the data goes
// into a new `..<timestamp>` directory, a `..data_tmp` symlink to it is renamed over `..data`, each key is a
// symlink `key -> ..data/key`, and the old data directory is removed. The visible key files never change
// themselves, which is why node-cache had to poll and why our watcher watches the directory.
type ConfigMapVolume struct {
	Dir string
	gen atomic.Int64
}

// NewConfigMapVolume returns a volume at dir (created if missing) holding data.
func NewConfigMapVolume(t testing.TB, dir string, data map[string]string) *ConfigMapVolume {
	t.Helper()
	v := &ConfigMapVolume{Dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.Update(t, data)
	return v
}

// Update atomically replaces the volume's content with data; keys not in data disappear.
func (v *ConfigMapVolume) Update(t testing.TB, data map[string]string) {
	t.Helper()
	if err := v.update(data); err != nil {
		t.Fatalf("update configmap volume %s: %v", v.Dir, err)
	}
}

func (v *ConfigMapVolume) update(data map[string]string) error {
	ts := fmt.Sprintf("..%s_%d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.gen.Add(1))
	tsDir := filepath.Join(v.Dir, ts)
	if err := os.Mkdir(tsDir, 0o755); err != nil {
		return err
	}
	for k, val := range data {
		if err := os.WriteFile(filepath.Join(tsDir, k), []byte(val), 0o644); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	tmp := filepath.Join(v.Dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		return err
	}
	// Key symlinks: add new ones, remove those no longer present.
	entries, _ := os.ReadDir(v.Dir)
	for _, e := range entries {
		if name := e.Name(); name[0] != '.' {
			if _, ok := data[name]; !ok {
				os.Remove(filepath.Join(v.Dir, name))
			}
		}
	}
	for k := range data {
		link := filepath.Join(v.Dir, k)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return err
			}
		}
	}
	if old != "" && old != ts {
		os.RemoveAll(filepath.Join(v.Dir, old))
	}
	return nil
}

// StandardCorefile is the node-local-dns ConfigMap's Corefile from the standard nodelocaldns.yaml, as node-cache
// sees it at run time after the documented deploy-time sed (iptables mode): LOCAL__DNS, DNS__DOMAIN and
// DNS__SERVER are filled in, __PILLAR__CLUSTER__DNS__ and __PILLAR__UPSTREAM__SERVERS__ are left for the agent.
func StandardCorefile(localIP, dnsServer, domain string) string {
	return fmt.Sprintf(`%[3]s:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind %[1]s %[2]s
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    health %[1]s:8080
    }
in-addr.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind %[1]s %[2]s
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    }
ip6.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind %[1]s %[2]s
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    }
.:53 {
    errors
    cache 30
    reload
    loop
    bind %[1]s %[2]s
    forward . __PILLAR__UPSTREAM__SERVERS__
    prometheus :9253
    }
`, localIP, dnsServer, domain)
}
