package options

import (
	"fmt"
	"regexp"
	"strings"
)

// A taint key is a Kubernetes qualified name: an optional DNS subdomain prefix and a slash, then a name of at
// most 63 characters (k8s.io/apimachinery's IsQualifiedName, which the API server applies to taints).
var (
	qualifiedName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomain  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validateTaintKey checks -startup-taint; "" (off) is valid. A key the API server would refuse on a taint is
// refused here, so it can never be a key no node carries.
func validateTaintKey(key string) error {
	if key == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("invalid value %q for flag -startup-taint: %s", key, why)
	}
	name := key
	if prefix, n, ok := strings.Cut(key, "/"); ok {
		if len(prefix) == 0 || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix) {
			return bad("the prefix before / must be a lowercase DNS subdomain (example.com)")
		}
		name = n
	}
	if len(name) == 0 || len(name) > 63 || !qualifiedName.MatchString(name) {
		return bad("want a taint key: [prefix/]name, the name at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
	}
	return nil
}
