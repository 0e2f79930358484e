package dnsserver

import (
	"log"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// LogWriter logs each of the standard logger's lines at the level its prefix names, without the prefix; a
// logger of the test's own stands for the process's (cmd routes the standard one there).
func TestLogWriter(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := log.New(LogWriter(zap.New(core)), "", 0)
	l.Print("[WARNING] plugin/reload: slow")
	l.Print("[ERROR] plugin/errors: 2 example. A: boom")
	l.Print("no prefix")
	want := []struct {
		level zapcore.Level
		msg   string
	}{{zapcore.WarnLevel, "plugin/reload: slow"}, {zapcore.ErrorLevel, "plugin/errors: 2 example. A: boom"}, {zapcore.InfoLevel, "no prefix"}}
	got := logs.All()
	if len(got) != len(want) {
		t.Fatalf("%d lines logged, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg {
			t.Errorf("line %d: %v %q, want %v %q", i, got[i].Level, got[i].Message, w.level, w.msg)
		}
	}
}
