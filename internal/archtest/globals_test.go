package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Process-wide state belongs to the process's owner (cmd/nodelocaldns), which passes registries, loggers and
// settings in, as kube-proxy does (issue 43). This check finds, in every non-test Go file under internal/, a
// use of a process-wide registry or logger redirection (processWide), and an exported package-level variable
// other than a sentinel error (Err...): a setting anyone could change under everyone. caddy's plugin registry,
// which caddy keeps per process, is the one left (internal/dnsserver registers into it through
// plugin.Register, which this check does not forbid).
var processWide = map[string][]string{
	"github.com/prometheus/client_golang/prometheus": {"DefaultRegisterer", "DefaultGatherer", "MustRegister",
		"Register", "Unregister"},
	"github.com/prometheus/client_golang/prometheus/promauto": {"*"},
	"log":             {"SetOutput", "SetFlags", "SetPrefix"},
	"go.uber.org/zap": {"ReplaceGlobals", "RedirectStdLog", "RedirectStdLogAt"},
}

// globalsPending are the findings this check knows of and lets pass for now, each with why; a finding that no
// longer occurs must leave the list, so that it only shrinks.
var globalsPending = map[string]string{}

// globalsIn lists what f (at rel) uses or declares of process-wide state, as "rel: pkg.Name" or "rel: var Name".
func globalsIn(rel string, f *ast.File) []string {
	imported := map[string]string{} // the name a package is used under -> its path
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imported[name] = path
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || id.Obj != nil { // a local variable, not a package
			return true
		}
		if names, ok := processWide[imported[id.Name]]; ok && (slices.Contains(names, "*") || slices.Contains(names, sel.Sel.Name)) {
			out = append(out, rel+": "+id.Name+"."+sel.Sel.Name)
		}
		return true
	})
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if n.IsExported() && !strings.HasPrefix(n.Name, "Err") {
						out = append(out, rel+": var "+n.Name)
					}
				}
			}
		}
	}
	return out
}

func TestNoProcessWideStateOutsideCmd(t *testing.T) {
	var found []string
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		found = append(found, globalsIn(filepath.ToSlash(rel), f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if _, ok := globalsPending[f]; !ok {
			t.Errorf("%s: process-wide state outside cmd; take the registry, logger or setting as an argument or a field of an options struct (a constant if it never changes)", f)
		}
	}
	for p := range globalsPending {
		if !slices.Contains(found, p) {
			t.Errorf("%s is no longer found: take it out of globalsPending", p)
		}
	}
}

// The check finds each kind of process-wide state (so that it can fail), and leaves alone what only looks
// like it: a FlagSet's SetOutput, a local variable named like a package, a sentinel error.
func TestGlobalsInFinds(t *testing.T) {
	src := `package p
import (
	"flag"
	"log"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)
var Limit = 3
var ErrGone = errors.New("gone")
var unexported = 4
func f(fs *flag.FlagSet) {
	log.SetOutput(nil)
	prom.MustRegister(nil)
	_ = prom.DefaultRegisterer
	promauto.NewCounter(prom.CounterOpts{})
	fs.SetOutput(nil)
	prometheus := struct{ DefaultRegisterer int }{}
	_ = prometheus.DefaultRegisterer
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go: log.SetOutput", "p.go: prom.MustRegister", "p.go: prom.DefaultRegisterer", "p.go: promauto.NewCounter", "p.go: var Limit"}
	if got := globalsIn("p.go", f); !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}
