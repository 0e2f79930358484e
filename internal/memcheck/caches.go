package memcheck

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// CoreDNS's cache (plugin/cache): a capacity is split over 256 shards of at least 4 entries each, so
// `success 9984` holds 9984 and the default 10000 holds 9984 too.
const (
	cacheDefaultCapacity = 10000
	cacheShards          = 256
	cacheMinShardSize    = 4
)

// Cache is one `cache` directive: where it is and how many entries it can hold.
type Cache struct {
	Line            int
	Success, Denial int64 // capacities as the cache rounds them
	PreferPositive  bool  // serve_stale_policy prefer_positive: each key may keep a second answer
}

// Caches returns the `cache` directives of corefile with their capacities, in the order of the server blocks.
// A directive imported several times (a snippet) counts each time: each import is a cache of its own.
func Caches(corefile []byte, directives []string) ([]Cache, error) {
	blocks, err := caddyfile.Parse("Corefile", bytes.NewReader(corefile), directives)
	if err != nil {
		return nil, err
	}
	var out []Cache
	for _, b := range blocks {
		toks := b.Tokens["cache"]
		for i := 0; i < len(toks); i++ {
			if toks[i].Text != "cache" {
				continue
			}
			c := Cache{Line: toks[i].Line, Success: rounded(cacheDefaultCapacity), Denial: rounded(cacheDefaultCapacity)}
			depth := 0
			for j := i + 1; j < len(toks); j++ {
				t := toks[j]
				if depth == 0 && t.Text == "cache" && t.Line != toks[i].Line {
					break
				}
				switch t.Text {
				case "{":
					depth++
				case "}":
					depth--
				case "serve_stale_policy":
					if depth == 1 && j+1 < len(toks) && toks[j+1].Line == t.Line && strings.EqualFold(toks[j+1].Text, "prefer_positive") {
						c.PreferPositive = true
					}
				case "success", "denial":
					if depth == 1 && j+1 < len(toks) && toks[j+1].Line == t.Line {
						if n, err := strconv.ParseInt(toks[j+1].Text, 10, 64); err == nil && n > 0 {
							if t.Text == "success" {
								c.Success = rounded(n)
							} else {
								c.Denial = rounded(n)
							}
						}
					}
				}
				if depth == 0 && t.Text == "}" {
					break
				}
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// rounded is the number of entries a cache of capacity n holds.
func rounded(n int64) int64 { return cacheShards * max(n/cacheShards, cacheMinShardSize) }
