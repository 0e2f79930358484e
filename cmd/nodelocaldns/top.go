package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
)

// topEvery is how often -top refreshes: the agent's rate window (internal/clients) closes every second.
const topEvery = time.Second

// topTimeout bounds one request to the agent.
const topTimeout = 2 * time.Second

// top is `-top`: the heaviest clients of the agent in this pod, from /clients on its health socket
// (dnsserver/clients.go), as a table refreshed every second until interrupted, or with asJSON one snapshot as
// the agent serves it. It exits 1 when the agent cannot be asked.
func top(socket string, n int, asJSON bool, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c := &http.Client{Timeout: topTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	url := fmt.Sprintf("http://health/clients?n=%d", n)
	if asJSON {
		body, err := fetch(ctx, c, url)
		if err != nil {
			fmt.Fprintf(stderr, "nodelocaldns: -top on %s: %v\n", socket, err)
			return 1
		}
		stdout.Write(body)
		return 0
	}
	clear := isTerminal(stdout)
	tick := time.NewTicker(topEvery)
	defer tick.Stop()
	for {
		body, err := fetch(ctx, c, url)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(stderr, "nodelocaldns: -top on %s: %v\n", socket, err)
			return 1
		}
		var snap clients.Snapshot
		if err := json.Unmarshal(body, &snap); err != nil {
			fmt.Fprintf(stderr, "nodelocaldns: -top on %s: %v\n", socket, err)
			return 1
		}
		if clear {
			io.WriteString(stdout, "\x1b[H\x1b[2J") // home, clear: redraw in place, as top does
		}
		renderTop(stdout, snap)
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
	}
}

func fetch(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("the agent counts no clients (%s=off, or a version without it)", clients.Env)
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// renderTop writes one screen: a summary line, then a row per client, heaviest first. Shares and the hit ratio
// are over the last second when the client asked in it, else over everything it asked.
func renderTop(w io.Writer, s clients.Snapshot) {
	fmt.Fprintf(w, "nodelocaldns -top  %s  answers %d  dropped %d  clients %d/%d  untracked ≤ %d each\n\n",
		s.At.UTC().Format(time.RFC3339), s.Answers, s.Dropped, s.Tracked, s.Capacity, s.TailBound)
	named := slices.ContainsFunc(s.Clients, func(c clients.Client) bool { return c.Name != "" }) // -pod-identity
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "CLIENT\tQ/S\tNXDOMAIN\tSERVFAIL\tHIT\tMISS MS\tANSWERS\t TOP NAMES\t"
	if named {
		head = "CLIENT\tPOD\t" + strings.TrimPrefix(head, "CLIENT\t")
	}
	fmt.Fprintln(tw, head)
	for _, c := range s.Clients {
		nx, sf, hit := share(c.NXRate, c.Rate, c.NXDomain, c.Answers), share(c.SFRate, c.Rate, c.ServFail, c.Answers),
			share(c.HitRate, c.Rate, c.Hits, c.Hits+c.Misses)
		who := c.Addr
		if named {
			who += "\t" + cmp.Or(c.Name, "-")
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%.1f\t%d\t %s\t\n", who, c.Rate, nx, sf, hit, c.MissLatencyMs, c.Answers, names(c.TopNames))
	}
	tw.Flush()
}

func share(windowPart, windowAll float64, part, all uint64) string {
	switch {
	case windowAll > 0:
		return fmt.Sprintf("%.0f%%", 100*windowPart/windowAll)
	case all > 0:
		return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(all))
	}
	return "-"
}

func names(ns []clients.Name) string {
	var parts []string
	for _, n := range ns[:min(3, len(ns))] {
		parts = append(parts, fmt.Sprintf("%s (%d)", n.Name, n.Count))
	}
	return strings.Join(parts, " ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
