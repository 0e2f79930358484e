package main

import (
	"os"
	"strings"
	"testing"
)

// The README at hand marks every block the README case runs, and each says what the case relies on.
func TestReadmeMarksTheBlocks(t *testing.T) {
	text, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(text), readmeBlockNames)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"build": "make image", "load (on each node)": "ctr -n k8s.io images import",
		"kustomize": "kubectl apply", "helm": "helm install", "helm-uninstall": "helm uninstall"} {
		if !strings.Contains(blocks[name], want) {
			t.Errorf("block %q does not contain %q:\n%s", name, want, blocks[name])
		}
	}
	if readmeImageRE.FindStringSubmatch(blocks["build"]) == nil {
		t.Errorf("the build block sets no image=REF:\n%s", blocks["build"])
	}
}

// A marker without its block, one used twice, and one of the wanted names missing are each an error.
func TestReadmeBlocksRefusesDrift(t *testing.T) {
	for name, text := range map[string]string{
		"no fence":  "<!-- readme-test: a -->\ntext\n",
		"twice":     "<!-- readme-test: a -->\n```sh\nx\n```\n<!-- readme-test: a -->\n```sh\ny\n```\n",
		"unclosed":  "<!-- readme-test: a -->\n```sh\nx\n",
		"not named": "<!-- readme-test: b -->\n```sh\nx\n```\n",
	} {
		if _, err := readmeBlocks(text, []string{"a"}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	b, err := readmeBlocks("<!-- readme-test: a -->\n```sh\nx=1\ny\n```\n", []string{"a"})
	if err != nil || b["a"] != "x=1\ny\n" {
		t.Errorf("got %q, %v; want the block's two lines", b["a"], err)
	}
}
