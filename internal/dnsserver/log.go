package dnsserver

import (
	"bytes"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

// LogWriter is where the standard logger, which CoreDNS and caddy write to ("[INFO] plugin/reload: ..."), is to
// write, with no flags (log.SetFlags(0)): it logs each line into z at the level named by its prefix. The
// standard logger is the process's: its owner (cmd/nodelocaldns) routes it, once.
func LogWriter(z *zap.Logger) io.Writer { return stdLogWriter{z.WithOptions(zap.AddCallerSkip(3))} }

type stdLogWriter struct{ z *zap.Logger }

var levelPrefixes = []struct {
	prefix string
	level  zapcore.Level
}{
	{"[DEBUG] ", zapcore.DebugLevel},
	{"[INFO] ", zapcore.InfoLevel},
	{"[WARNING] ", zapcore.WarnLevel},
	{"[ERROR] ", zapcore.ErrorLevel},
	{"[FATAL] ", zapcore.ErrorLevel},
	{"[PANIC] ", zapcore.ErrorLevel},
}

func (w stdLogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimRight(p, "\n")
	level := zapcore.InfoLevel
	for _, lp := range levelPrefixes {
		if bytes.HasPrefix(line, []byte(lp.prefix)) {
			level, line = lp.level, line[len(lp.prefix):]
			break
		}
	}
	if ce := w.z.Check(level, string(line)); ce != nil {
		// CoreDNS's prometheus plugin only logs a bind it could not make and serves on without its metrics
		// ("Failed to start metrics handler: listen tcp :9253: bind: address already in use"): say who holds it.
		var fields []zap.Field
		if bytes.Contains(line, []byte("address already in use")) {
			if h := sockholder.Describe(string(line)); h != "" {
				fields = append(fields, zap.String("holder", h))
			}
		}
		ce.Write(fields...)
	}
	return len(p), nil
}
