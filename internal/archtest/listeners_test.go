package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Every listener the agent opens goes through internal/listenlimit, where its bound is decided and counted in
// the memory check: a listener opened anywhere else is one that nothing bounds, which any pod on the node can
// hold open until the agent runs out of descriptors or memory (issue 39: CoreDNS's own :9253 did). This check
// finds, in every non-test Go file under cmd/ and internal/, a call that opens a stream listener.
//
// Allowed: listenlimit itself, and testenv (test support, never linked into the agent).
var listenAllowed = []string{"internal/listenlimit", "internal/testenv"}

// listenFuncs are the package-level functions that open a stream listener, by the name their package is
// imported under.
var listenFuncs = map[string]bool{
	"net.Listen": true, "net.ListenTCP": true, "net.ListenUnix": true, "net.FileListener": true,
	"reuseport.Listen": true, "http.ListenAndServe": true, "http.ListenAndServeTLS": true,
}

// listenCalls lists where src calls a listen function: one of listenFuncs, or a method Listen(ctx, network,
// address) (net.ListenConfig's, which the reuseport helpers wrap).
func listenCalls(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		name := sel.Sel.Name
		if id, ok := sel.X.(*ast.Ident); ok && listenFuncs[id.Name+"."+name] {
			out = append(out, fset.Position(call.Pos()).String()+": "+id.Name+"."+name)
		} else if name == "Listen" && len(call.Args) == 3 {
			out = append(out, fset.Position(call.Pos()).String()+": a ListenConfig's Listen")
		}
		return true
	})
	return out
}

func TestEveryListenerIsBoundedByListenlimit(t *testing.T) {
	var found []string
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				for _, a := range listenAllowed {
					if rel == a {
						return filepath.SkipDir
					}
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			found = append(found, listenCalls(fset, f)...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range found {
		t.Errorf("%s opens a listener outside internal/listenlimit: open it through a listenlimit.Pool, with its bound in listenlimit/bounds.go", f)
	}
}

// The check finds each way of opening a listener (so that it can fail).
func TestListenCallsFindsBypasses(t *testing.T) {
	src := `package p
func f() {
	net.Listen("tcp", ":1")
	reuseport.Listen("tcp", ":2")
	(&net.ListenConfig{}).Listen(ctx, "tcp", ":3")
	http.ListenAndServe(":4", nil)
	net.ListenPacket("udp", ":5") // datagrams hold no connection: not a listener here
	pool.Open(":6")
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := listenCalls(fset, f); len(got) != 4 {
		t.Errorf("found %d listen calls, want 4: %q", len(got), got)
	}
}
