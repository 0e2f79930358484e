package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dockerConfig is what the final stage of deploy/Dockerfile sets in the image config.
type dockerConfig struct {
	Entrypoint []string
	User       string
	Env        []string
	Labels     map[string]string
	WorkingDir string
	Base       string
	BuildFlags string // the RUN line of the build stage that runs go build
}

// parseDockerfile reads the instructions of deploy/Dockerfile that shape the image config, for our Dockerfile's
// plain subset: continuation lines, ARG defaults, ENV/LABEL key=value pairs with double quotes, ENTRYPOINT as
// JSON. version stands for ${VERSION} as `--build-arg VERSION=...` would.
func parseDockerfile(path, version string) (*dockerConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(b), "")
	c := &dockerConfig{Labels: map[string]string{}}
	expand := func(s string) string { return strings.ReplaceAll(s, "${VERSION}", version) }
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			*c = dockerConfig{Labels: map[string]string{}, BuildFlags: c.BuildFlags} // a new stage starts afresh
			c.Base = strings.Fields(rest)[len(strings.Fields(rest))-1]
			if f := strings.Fields(rest); len(f) >= 3 && strings.EqualFold(f[len(f)-2], "AS") {
				c.Base = f[len(f)-3]
			}
		case "RUN":
			if strings.Contains(rest, "go build ") {
				c.BuildFlags = rest
			}
		case "ENV", "LABEL":
			kvs, err := keyValues(expand(rest))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", line, err)
			}
			for _, kv := range kvs {
				if instr == "ENV" {
					c.Env = append(c.Env, kv[0]+"="+kv[1])
				} else {
					c.Labels[kv[0]] = kv[1]
				}
			}
		case "USER":
			c.User = rest
		case "WORKDIR":
			c.WorkingDir = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &c.Entrypoint); err != nil {
				return nil, fmt.Errorf("%s: exec form expected: %w", line, err)
			}
		}
	}
	return c, nil
}

// keyValues splits `k=v k2="v 2"` into pairs.
func keyValues(s string) ([][2]string, error) {
	var out [][2]string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || strings.ContainsAny(k, " \"") {
			return nil, fmt.Errorf("want key=value at %q", s)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote at %q", rest)
			}
			v, s = rest[1:end+1], rest[end+2:]
		} else {
			v, s, _ = strings.Cut(rest, " ")
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// makeVar returns the default of `NAME ?= value` or `NAME := value` in deploy/deploy.mk, continuation lines joined.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("deploy.mk")
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(b), "")
	m := regexp.MustCompile(`(?m)^` + name + `\s*[?:]=\s*(.*)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("deploy.mk does not set %s", name)
	}
	return strings.TrimSpace(m[1])
}

// TestDockerfileBuildsLikeMakeImage: both build paths compile the binary the same way.
func TestDockerfileBuildsLikeMakeImage(t *testing.T) {
	c, err := parseDockerfile("Dockerfile", "v9")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Base, "gcr.io/distroless/static") {
		t.Errorf("runtime base = %q, want gcr.io/distroless/static", c.Base)
	}
	mk := makeVar(t, "IMAGE_GOBUILD")
	for _, want := range []string{"CGO_ENABLED=0", "GOOS=", "GOARCH=", "go build -ldflags=", "-s -w -buildid= -X main.version="} {
		if !strings.Contains(c.BuildFlags, want) {
			t.Errorf("Dockerfile build %q lacks %q", c.BuildFlags, want)
		}
		if !strings.Contains(mk, want) {
			t.Errorf("deploy.mk IMAGE_GOBUILD %q lacks %q", mk, want)
		}
	}
}
