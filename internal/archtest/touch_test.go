package archtest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// What a package may touch is one line of its doc comment, `May touch: ...`, the same words as its row's last
// cell in docs/architecture.md. The line names one thing (no "and": a room that touches two things is two rooms),
// and the parts of it a reader can get wrong by accident are checked against the package's non-test Go files:
// a package that imports a netlink library, opens or writes a file, listens, dials or runs a command must say
// so in its line, and a package whose line is "nothing" does none of these.

const mayTouchPrefix = "May touch: "

// An effect is a kind of thing a package's code can touch, found by what it imports or calls, and the words of
// which its May touch line must use at least one.
type effect struct {
	name  string
	words []string
}

var (
	effNetlink = effect{"netlink (imports a netlink library)", []string{"nftables", "netlink", "interface", "kernel"}}
	effFiles   = effect{"files (opens, reads or writes one)", []string{"file", "folder", "director", "/proc", "volume"}}
	effListen  = effect{"listeners (opens one)", []string{"listen", "socket"}}
	effDial    = effect{"connections (dials one)", []string{"socket", "connection", "dial", "server", "upstream"}}
	effExec    = effect{"processes (runs a command)", []string{"command", "process"}}
)

// netlinkCall says whether calling name from the package at path opens or uses a netlink socket: the calls
// that make a connection or a handle (google/nftables, mdlayher/netlink), and every function of
// vishvananda/netlink and netns but the few that only build a value. A package that only uses their types
// (nft encodes google/nftables expressions) touches nothing by that.
func netlinkCall(path, name string) bool {
	switch path {
	case "github.com/google/nftables":
		return strings.HasPrefix(name, "New")
	case "github.com/mdlayher/netlink":
		return name == "Dial"
	case "github.com/vishvananda/netlink", "github.com/vishvananda/netns":
		return !slices.Contains([]string{"NewLinkAttrs", "ParseAddr", "ParseIPNet", "NewIPNet"}, name)
	case "github.com/ti-mo/conntrack":
		return name == "Dial"
	}
	return false
}

// fileCalls are the os functions that open, read, write or list a file or a folder.
var fileCalls = map[string]bool{
	"WriteFile": true, "Create": true, "OpenFile": true, "Remove": true, "RemoveAll": true, "Rename": true,
	"Mkdir": true, "MkdirAll": true, "Chmod": true, "Symlink": true, "CreateTemp": true, "MkdirTemp": true,
	"ReadFile": true, "Open": true, "ReadDir": true, "Stat": true, "Lstat": true, "Readlink": true, "DirFS": true,
}

// effectsOf lists the effects the Go files of one package show, by effect name, each with where it was seen
// first.
func effectsOf(fset *token.FileSet, files []*ast.File) map[string]string {
	found := map[string]string{}
	see := func(e effect, pos token.Pos, what string) {
		if _, ok := found[e.name]; !ok {
			found[e.name] = fset.Position(pos).String() + ": " + what
		}
	}
	for _, f := range files {
		imported := map[string]string{} // the name a file calls a package by, to its path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imported[name] = path
			switch path {
			case "os/exec":
				see(effExec, imp.Pos(), "imports os/exec")
			case "github.com/fsnotify/fsnotify":
				see(effFiles, imp.Pos(), "imports fsnotify")
			}
		}
		for _, l := range listenCalls(fset, f) {
			if _, ok := found[effListen.name]; !ok {
				found[effListen.name] = l
			}
		}
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
			pkg := ""
			if id, ok := sel.X.(*ast.Ident); ok {
				pkg = id.Name
			}
			path := imported[pkg]
			switch {
			case netlinkCall(path, name):
				see(effNetlink, call.Pos(), path+"."+name)
			case path == "os" && fileCalls[name]:
				see(effFiles, call.Pos(), "os."+name)
			case path == "net" && strings.HasPrefix(name, "Listen"):
				see(effListen, call.Pos(), "net."+name)
			case path == "golang.org/x/sys/unix" && name == "Socket" && len(call.Args) > 0 && isIdent(call.Args[0], "AF_NETLINK"):
				see(effNetlink, call.Pos(), "unix.Socket(AF_NETLINK)")
			case path == "net" && strings.HasPrefix(name, "Dial"), path == "golang.org/x/sys/unix" && name == "Socket":
				see(effDial, call.Pos(), pkg+"."+name)
			case path == "" && (name == "DialContext" || name == "Dial") && len(call.Args) >= 2:
				see(effDial, call.Pos(), "a Dialer's "+name)
			}
			return true
		})
	}
	return found
}

// isIdent reports whether e is name or pkg.name.
func isIdent(e ast.Expr, name string) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == name
	case *ast.SelectorExpr:
		return e.Sel.Name == name
	}
	return false
}

// mayTouchLine returns the first sentence after "May touch: " in the package's doc comment, without its period.
func mayTouchLine(files []*ast.File) (string, error) {
	var lines []string
	for _, f := range files {
		if f.Doc == nil {
			continue
		}
		for _, c := range f.Doc.List {
			text := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
			if rest, ok := strings.CutPrefix(text, mayTouchPrefix); ok {
				rest, _, _ = strings.Cut(rest, ". ") // the first sentence; the comment may go on to say why
				lines = append(lines, strings.TrimSuffix(rest, "."))
			}
		}
	}
	switch len(lines) {
	case 0:
		return "", errors.New(`its doc comment has no line "May touch: ..."`)
	case 1:
		return lines[0], nil
	}
	return "", fmt.Errorf("its doc comments have %d lines \"May touch: ...\", want one", len(lines))
}

// checkMayTouch says what is wrong with one package's May touch line given the effects its code shows.
func checkMayTouch(line string, effects map[string]string) []string {
	var bad []string
	lower := strings.ToLower(line)
	if strings.Contains(" "+lower+" ", " and ") {
		bad = append(bad, fmt.Sprintf("%q has an \"and\": name the one thing it may touch, or split the package", line))
	}
	nothing := strings.HasPrefix(lower, "nothing")
	for _, e := range []effect{effNetlink, effFiles, effListen, effDial, effExec} {
		where, ok := effects[e.name]
		if !ok {
			continue
		}
		if nothing {
			bad = append(bad, fmt.Sprintf("says it touches nothing, but touches %s at %s", e.name, where))
			continue
		}
		if !slices.ContainsFunc(e.words, func(w string) bool { return strings.Contains(lower, w) }) {
			bad = append(bad, fmt.Sprintf("%q names none of %q, but the package touches %s at %s", line, e.words, e.name, where))
		}
	}
	return bad
}

// packages parses the non-test Go files of every package under cmd/ and internal/, by path from the root.
func packages(t *testing.T) map[string][]*ast.File {
	t.Helper()
	out := map[string][]*ast.File{}
	fset := token.NewFileSet()
	eachPackage(t, func(rel, dir string, pkg *build.Package) error {
		for _, name := range pkg.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
			if err != nil {
				return err
			}
			out[rel] = append(out[rel], f)
		}
		return nil
	})
	touchFset = fset
	return out
}

var touchFset *token.FileSet

// TestEveryPackageSaysWhatItMayTouch: each package's doc comment has its one-line May touch, the line holds
// against what its code shows, and docs/architecture.md's parts table has the same words in the package's row
// (`go test ./internal/archtest -update` copies them there).
func TestEveryPackageSaysWhatItMayTouch(t *testing.T) {
	pkgs := packages(t)
	lines := map[string]string{}
	for _, path := range slices.Sorted(maps.Keys(pkgs)) {
		line, err := mayTouchLine(pkgs[path])
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		lines[path] = line
		for _, bad := range checkMayTouch(line, effectsOf(touchFset, pkgs[path])) {
			t.Errorf("%s: %s", path, bad)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	page, diffs := withMayTouchCells(string(b), lines)
	if *update {
		if err := os.WriteFile(filepath.Join(root, doc), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, d := range diffs {
		t.Errorf("%s: %s (go test ./internal/archtest -update copies the package docs' lines)", doc, d)
	}
}

// withMayTouchCells returns the page with the last cell of each package's row in the parts table set to its
// May touch line, and what differed. A row naming several packages (`a`, `b`) takes the first one's line, and
// the others must say the same.
func withMayTouchCells(page string, lines map[string]string) (string, []string) {
	var diffs []string
	out := strings.Split(page, "\n")
	inParts := false
	for i, row := range out {
		if strings.HasPrefix(row, "## ") {
			inParts = strings.HasPrefix(row, "## Parts")
		}
		if !inParts || !strings.HasPrefix(row, "| `") {
			continue
		}
		cells := strings.Split(row, " | ")
		if len(cells) < 3 {
			continue
		}
		names := strings.Split(strings.TrimPrefix(cells[0], "| "), ",")
		want := ""
		for j, name := range names {
			name = strings.Trim(strings.TrimSpace(name), "`")
			line, ok := lines[name]
			if !ok {
				continue
			}
			if j > 0 && line != want {
				diffs = append(diffs, fmt.Sprintf("the row of %s says %q but %s's doc says %q", cells[0], want, name, line))
			}
			if want == "" {
				want = line
			}
		}
		if want == "" {
			continue
		}
		last := strings.TrimSuffix(cells[len(cells)-1], " |")
		if last != want {
			diffs = append(diffs, fmt.Sprintf("the row of %s may touch %q, its doc says %q", cells[0], last, want))
			cells[len(cells)-1] = want + " |"
			out[i] = strings.Join(cells, " | ")
		}
	}
	return strings.Join(out, "\n"), diffs
}

// TestMayTouchCheckFindsWhatALineLeavesOut: the check is not one that cannot fail.
func TestMayTouchCheckFindsWhatALineLeavesOut(t *testing.T) {
	src := `// Package p.
//
// May touch: nothing.
package p

import (
	"net"
	"os"
	"github.com/vishvananda/netlink"
)

var _, _ = netlink.LinkList()

func f() { os.WriteFile("x", nil, 0o600); net.ListenPacket("udp", ":0"); net.Dial("tcp", "x:1") }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	line, err := mayTouchLine([]*ast.File{f})
	if err != nil || line != "nothing" {
		t.Fatalf("mayTouchLine = %q, %v", line, err)
	}
	effects := effectsOf(fset, []*ast.File{f})
	for _, e := range []effect{effNetlink, effFiles, effListen, effDial} {
		if _, ok := effects[e.name]; !ok {
			t.Errorf("effectsOf missed %s", e.name)
		}
	}
	if bad := checkMayTouch(line, effects); len(bad) != 4 {
		t.Errorf("checkMayTouch(%q) = %q, want four complaints", line, bad)
	}
	if bad := checkMayTouch("the files it renders and the sockets it listens on", effects); len(bad) != 2 {
		t.Errorf("checkMayTouch with an and and no netlink word = %q, want two complaints", bad)
	}
	if bad := checkMayTouch("our interface over rtnetlink, its files, the sockets it listens on or dials", effects); len(bad) != 0 {
		t.Errorf("checkMayTouch of a line naming every effect = %q, want none", bad)
	}
}
