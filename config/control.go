package config

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"

	"github.com/offload-dev/offload/tunnel/control"
)

// ControlOff is the control setting that makes no control socket.
const ControlOff = "off"

// ControlName is the default control socket's name for the config file
// file: its base name without the extension, and 8 hex digits of the
// SHA-256 of its absolute path, so that two ends with configs of the same
// name in different directories do not meet on one socket, and an end and
// offload status -c with the same file always do ("server-3fa09c1e").
func ControlName(file string) string {
	abs, err := filepath.Abs(file)
	if err != nil {
		abs = file
	}
	sum := sha256.Sum256([]byte(abs))
	base := filepath.Base(file)
	return strings.TrimSuffix(base, filepath.Ext(base)) + "-" + hex.EncodeToString(sum[:4])
}

// defaultControl is the control socket of an end whose config is file,
// when the config does not set control (tunnel/control.DefaultPath).
func defaultControl(file string) string { return control.DefaultPath(ControlName(file)) }

// ControlSet reports whether the config sets control (else Control is
// the default socket, which an end that cannot make it runs without).
func (c *Common) ControlSet() bool {
	_, ok := c.fields["control"]
	return ok
}
