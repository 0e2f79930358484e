package harness

import (
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/deploy"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// ConfigMapVolume is a directory updated the way the kubelet's AtomicWriter updates a ConfigMap volume
// ([testenv.WriteConfigMap]): the data goes into a new `..<timestamp>` directory, a `..data_tmp` symlink to it is
// renamed over `..data`, each key is a symlink `key -> ..data/key`, and the old data directory is removed. The
// visible key files never change themselves, which is why node-cache had to poll and why our watcher watches the
// directory.
type ConfigMapVolume struct {
	Dir string
}

// NewConfigMapVolume returns a volume at dir (created if missing) holding data.
func NewConfigMapVolume(t testing.TB, dir string, data map[string]string) *ConfigMapVolume {
	t.Helper()
	v := &ConfigMapVolume{Dir: dir}
	v.Update(t, data)
	return v
}

// Update atomically replaces the volume's content with data; keys not in data disappear.
func (v *ConfigMapVolume) Update(t testing.TB, data map[string]string) {
	t.Helper()
	testenv.WriteConfigMap(t, v.Dir, data)
}

// StandardCorefile is the node-local-dns ConfigMap's Corefile that deploy/ ships ([deploy.StandardCorefile]), as
// node-cache sees it at run time after the documented deploy-time sed (iptables mode): LOCAL__DNS, DNS__DOMAIN and
// DNS__SERVER are filled in, __PILLAR__CLUSTER__DNS__ and __PILLAR__UPSTREAM__SERVERS__ are left for the agent.
func StandardCorefile(localIP, dnsServer, domain string) string {
	tmpl := deploy.StandardCorefile
	if strings.Contains(localIP, ":") { // an IPv6 address in host:port needs brackets, as node-cache's docs say
		tmpl = strings.ReplaceAll(tmpl, "health __PILLAR__LOCAL__DNS__:", "health [__PILLAR__LOCAL__DNS__]:")
	}
	return strings.NewReplacer(
		"__PILLAR__LOCAL__DNS__", localIP,
		"__PILLAR__DNS__SERVER__", dnsServer,
		"__PILLAR__DNS__DOMAIN__", domain,
	).Replace(tmpl)
}
