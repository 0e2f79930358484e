package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
)

func TestRenderTop(t *testing.T) {
	var b bytes.Buffer
	renderTop(&b, clients.Snapshot{At: time.Unix(1_700_000_000, 0), Answers: 1500, Tracked: 2, Capacity: 1024, Clients: []clients.Client{
		{Addr: "10.0.0.21", Rate: 200, NXRate: 150, SFRate: 0, HitRate: 180, Answers: 1000, NXDomain: 750, Hits: 900, Misses: 100,
			MissLatencyMs: 1.25, TopNames: []clients.Name{{Name: "api.example.com.svc.cluster.local.", Count: 300}}},
		{Addr: "10.0.0.22", Answers: 500, NoError: 500, Hits: 250, Misses: 250}, // quiet now: its shares over everything
	}})
	lines := strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[0], "nodelocaldns -top  2023-11-14T22:13:20Z  answers 1500") {
		t.Errorf("summary %q", lines[0])
	}
	want := [][]string{
		{"CLIENT", "Q/S", "NXDOMAIN", "SERVFAIL", "HIT", "MISS", "MS", "ANSWERS", "TOP", "NAMES"},
		{"10.0.0.21", "200", "75%", "0%", "90%", "1.2", "1000", "api.example.com.svc.cluster.local.", "(300)"},
		{"10.0.0.22", "0", "0%", "0%", "50%", "0.0", "500"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[2+i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("row %d: %q, want %q", i, got, w)
		}
	}
}

func TestTopWithoutAnAgent(t *testing.T) {
	var out, errs bytes.Buffer
	if code := top(filepath.Join(t.TempDir(), "none.sock"), 5, true, &out, &errs); code != 1 || !strings.Contains(errs.String(), "-top on") {
		t.Errorf("exit %d, %q: want 1 and the socket named", code, errs.String())
	}
}

// With pod identity, a POD column names each client ("-" when unknown).
func TestRenderTopNamesPods(t *testing.T) {
	var b bytes.Buffer
	renderTop(&b, clients.Snapshot{Clients: []clients.Client{{Addr: "10.244.0.5", Name: "default/web-1", Rate: 5, Answers: 5}, {Addr: "10.0.0.9", Answers: 1}}})
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[2]); f[0] != "CLIENT" || f[1] != "POD" {
		t.Errorf("header %q", lines[2])
	}
	if f := strings.Fields(lines[3]); f[0] != "10.244.0.5" || f[1] != "default/web-1" {
		t.Errorf("row %q", lines[3])
	}
	if f := strings.Fields(lines[4]); f[0] != "10.0.0.9" || f[1] != "-" {
		t.Errorf("row %q", lines[4])
	}
}
