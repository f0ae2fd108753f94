package config

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Each is wrapped by an error that names the file and says
// what is wrong; test for them with errors.Is.
var (
	// ErrKeyPermissions means a key file is readable or writable by group or
	// others. Fix it with chmod 600; offload refuses to start otherwise, as
	// ssh does with private keys.
	ErrKeyPermissions = errors.New("key file permissions too open")
	// ErrKeyOwner means a key file belongs to a user other than the one
	// offload runs as or root, who could change it. chown it to that user.
	ErrKeyOwner = errors.New("key file has the wrong owner")
	// ErrKeyDirectory means a directory on a key file's path can be written
	// by someone other than its owner, or belongs to another user, so the
	// file could be replaced. Move the key or fix the directory (chmod
	// go-w, chown).
	ErrKeyDirectory = errors.New("key file is in an unsafe directory")
	// ErrKeyWeak means a key file holds a key of one repeated byte (such as
	// all zeros): a placeholder, not a secret. Make one with offload keygen.
	ErrKeyWeak = errors.New("key is not random")
	// ErrTokenFormat means a token file (metrics_token_file) is not one
	// line of 16 to 1024 visible ASCII characters. Make one with
	// "head -c 32 /dev/urandom | base64".
	ErrTokenFormat = errors.New("token file is not one token")
	// ErrKeyLength means a key file decodes to the wrong number of bytes.
	// Make a new key with "offload keygen" and copy it to both ends.
	ErrKeyLength = errors.New("wrong key length")
	// ErrKeyFormat means a key file is not one line of standard base64.
	// Make a new key with "offload keygen".
	ErrKeyFormat = errors.New("key file is not base64")
	// ErrNotRegular means a key or config path is a directory, device or
	// other non-regular file. Point the config at a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge means a config or key file is larger than any valid one
	// could be; it was not read in full.
	ErrTooLarge = errors.New("file too large")
	// ErrUnknownKind means a config file cannot be told apart as server or
	// client: it has neither services (server) nor server/forwards (client),
	// or both. It is reported inside an Errors value.
	ErrUnknownKind = errors.New("neither a server nor a client config")
)

// Error is one problem in a config file, at a line and field.
type Error struct {
	File  string // the config file's name as given to Load
	Line  int    // 1-based line; always set
	Col   int    // 1-based column; 0 when unknown
	Field string // field path, e.g. "services.web", "forwards[1].listen"; empty for whole-file errors
	Msg   string // what is wrong, for people
	Err   error  // the cause, if any (a sentinel or an OS error); see Unwrap
}

// Error formats the error as "FILE:LINE: FIELD: MSG".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	fmt.Fprintf(&b, "%d: ", e.Line)
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the cause, so errors.Is(err, ErrKeyPermissions) works on a
// key_file error.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one config file, in file order. Parsing
// and validation collect all of them rather than stop at the first.
type Errors []*Error

// Error lists the errors one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is and errors.As look at every error in the list.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sentinelError is a message for people that wraps a sentinel for code, so
// the message need not repeat the sentinel's own text.
type sentinelError struct {
	msg string
	err error
}

func (e *sentinelError) Error() string { return e.msg }
func (e *sentinelError) Unwrap() error { return e.err }
