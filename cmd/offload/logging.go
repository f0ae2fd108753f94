package main

import (
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/config"
)

// newLogger builds the process logger from the config's log section:
// console (for people) or JSON (for machines), at the configured level, to
// w (stderr).
func newLogger(l config.Log, w io.Writer) *zap.Logger {
	ec := zap.NewProductionEncoderConfig()
	ec.TimeKey = "ts"
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeDuration = roundedDuration
	var enc zapcore.Encoder
	if l.Format == config.LogJSON {
		enc = zapcore.NewJSONEncoder(ec)
	} else {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), l.Level))
}

// roundedDuration writes a duration as text rounded to the millisecond
// ("1.235s", not "1.234567891s"): nobody acts on the nanoseconds, and
// they make lines hard to scan. One under a millisecond keeps its
// microseconds, so that it does not read as 0s.
func roundedDuration(d time.Duration, enc zapcore.PrimitiveArrayEncoder) {
	unit := time.Millisecond
	if d > -time.Millisecond && d < time.Millisecond {
		unit = time.Microsecond
	}
	enc.AppendString(d.Round(unit).String())
}
