package dnsserver

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
)

// defaultTop is how many clients /clients lists unless asked (?n=).
const defaultTop = 20

// socketMux is the health socket's: /health and /ready, and /clients, the per-client accounting that
// `nodelocaldns -top` shows. Only the socket serves it: the TCP health address is reachable by every pod, and
// who asks what is not every pod's to read.
func (s *Server) socketMux() *http.ServeMux {
	mux := s.healthMux()
	if s.clients == nil {
		return mux
	}
	mux.HandleFunc("/clients", func(w http.ResponseWriter, r *http.Request) {
		n := defaultTop
		if v := r.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 0 {
				http.Error(w, "n: not a count: "+v, http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.clients.Snapshot(min(n, clients.MaxClients)))
	})
	return mux
}
