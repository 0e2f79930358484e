package dnsserver

import (
	"bytes"
	"log"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// routeStdLog sends the standard logger, which CoreDNS and caddy write to ("[INFO] plugin/reload: ..."), into z
// at the level named by the line's prefix.
func routeStdLog(z *zap.Logger) {
	log.SetFlags(0)
	log.SetOutput(stdLogWriter{z.WithOptions(zap.AddCallerSkip(3))})
}

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
		ce.Write()
	}
	return len(p), nil
}
