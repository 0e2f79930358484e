package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// render builds a kustomization directory with kustomize's library, as `kubectl kustomize dir` does.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// sed applies the deploy-time substitutions in order, as `sed -e s/old/new/g -e ...` does.
func sed(b []byte, subst [][2]string) []byte {
	for _, s := range subst {
		b = bytes.ReplaceAll(b, []byte(s[0]), []byte(s[1]))
	}
	return b
}

// manifest is a decoded multi-document YAML file: the objects the standard nodelocaldns.yaml has.
type manifest struct {
	serviceAccounts map[string]*corev1.ServiceAccount
	services        map[string]*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	daemonSets      map[string]*appsv1.DaemonSet
}

// decodeStrict decodes every YAML document in b into its Kubernetes API type. Unknown or duplicate fields,
// unknown kinds and repeated objects are errors: a typo in a manifest must fail here, not be dropped silently by
// the API server's decoder.
func decodeStrict(b []byte) (*manifest, error) {
	m := &manifest{
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		services:        map[string]*corev1.Service{},
		configMaps:      map[string]*corev1.ConfigMap{},
		daemonSets:      map[string]*appsv1.DaemonSet{},
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split documents: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		if err := m.add(doc); err != nil {
			return nil, err
		}
	}
}

func (m *manifest) add(doc []byte) error {
	var tm struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("read apiVersion and kind: %w", err)
	}
	var name string
	var err error
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/ServiceAccount":
		name, err = decodeInto(doc, m.serviceAccounts, func(o *corev1.ServiceAccount) string { return o.Namespace + "/" + o.Name })
	case "v1/Service":
		name, err = decodeInto(doc, m.services, func(o *corev1.Service) string { return o.Namespace + "/" + o.Name })
	case "v1/ConfigMap":
		name, err = decodeInto(doc, m.configMaps, func(o *corev1.ConfigMap) string { return o.Namespace + "/" + o.Name })
	case "apps/v1/DaemonSet":
		name, err = decodeInto(doc, m.daemonSets, func(o *appsv1.DaemonSet) string { return o.Namespace + "/" + o.Name })
	default:
		return fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", tm.Kind, name, err)
	}
	return nil
}

// decodeInto strictly decodes doc into a new T and files it under key(obj), refusing a second object with that key.
func decodeInto[T any](doc []byte, into map[string]*T, key func(*T) string) (string, error) {
	obj := new(T)
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return "", fmt.Errorf("strict decode: %w", err)
	}
	k := key(obj)
	if _, dup := into[k]; dup {
		return k, fmt.Errorf("defined twice")
	}
	into[k] = obj
	return k, nil
}

// stripComments drops whole-line YAML comments, so a document of comments only counts as empty.
func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// yamlFiles lists every .yaml file under dir but the chart's (templates, not YAML: the chart tests decode what
// they render).
func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p == filepath.Join(dir, chartDir) {
			return filepath.SkipDir
		}
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") && !strings.Contains(p, "testdata") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// decodeKustomization strictly decodes a kustomization.yaml.
func decodeKustomization(b []byte) (*types.Kustomization, error) {
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		return nil, fmt.Errorf("strict decode: %w", err)
	}
	return &k, nil
}
