package testutil

import (
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// LeakCheck fails the test if it leaves a goroutine behind. It must be
// the first thing a test calls: its cleanup then runs last.
func LeakCheck(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// ObservedLogger logs warnings and up to the test log and everything to
// an observer the test can search.
func ObservedLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	tl := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	return zap.New(zapcore.NewTee(core, tl.Core())), logs
}
