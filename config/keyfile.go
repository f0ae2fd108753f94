package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Key files
//
// A key file holds the pre-shared key both ends of a tunnel use: KeySize
// random bytes as one line of standard (padded, RFC 4648 §4) base64,
// followed by a newline, for example
//
//	q3Vd0XkzC6y1k8bZ6bq0p8yq5gk5Wm0G3yq1o6o0E2s=
//
// so it can be copied to the other router by hand or with scp. Leading and
// trailing white space is ignored when reading.
//
// LoadKey treats the file as ssh treats a private key (OpenSSH's
// secure_filename), and each refusal names the rule and the path:
//
//   - mode: group and others have no access (0600 or stricter);
//   - owner: the file belongs to the user offload runs as, or to root;
//   - directory: no directory above the file, up to /, may be written by
//     anyone but its owner, who must be that user or root. This holds for
//     the real path (symlinks resolved) and, stricter than OpenSSH, for the
//     path as given, since whoever can replace a symlink picks the key. As
//     an exception to OpenSSH, a sticky directory owned by root or that
//     user (/tmp) is allowed: the sticky bit stops others from renaming or
//     removing what is in it;
//   - value: the key is KeySize bytes and not all one value (an all-zero
//     file is a placeholder, not a secret).

// KeySize is the length of a pre-shared key in bytes.
const KeySize = 32

// maxKeyFile bounds what LoadKey reads: a valid key file is 45 bytes.
const maxKeyFile = 4096

// GenerateKey returns a new random key from crypto/rand.
func GenerateKey() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return key, nil
}

// EncodeKey returns the key file contents for key: base64 and a newline.
func EncodeKey(key []byte) []byte {
	out := make([]byte, base64.StdEncoding.EncodedLen(len(key))+1)
	base64.StdEncoding.Encode(out, key)
	out[len(out)-1] = '\n'
	return out
}

// DecodeKey parses key file contents. It wraps ErrKeyFormat for anything
// that is not base64 and ErrKeyLength for a key that is not KeySize bytes.
func DecodeKey(data []byte) ([]byte, error) {
	text := bytes.TrimSpace(data)
	key := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(key, text)
	if err != nil {
		return nil, &sentinelError{fmt.Sprintf("rule value: not a base64 key (%v); make one with offload keygen", err), ErrKeyFormat}
	}
	if n != KeySize {
		return nil, &sentinelError{fmt.Sprintf("rule value: key is %d bytes, want %d; make one with offload keygen", n, KeySize), ErrKeyLength}
	}
	if bytes.Count(key[:n], key[:1]) == n {
		return nil, &sentinelError{fmt.Sprintf("rule value: key is %d bytes of 0x%02x, not a secret; make one with offload keygen", n, key[0]), ErrKeyWeak}
	}
	if why := weakKey(key[:n]); why != "" {
		return nil, &sentinelError{fmt.Sprintf("rule value: key %s, not a secret; make one with offload keygen", why), ErrKeyWeak}
	}
	return key[:n], nil
}

// Weak keys beyond one repeated byte. Either rule refuses a random key
// with odds below 2^-100: a period of at most maxKeyPeriod bytes means the
// other bytes repeat the first ones (2^-128 for a period of 16), and
// fewer than minKeyBytes distinct values among 32 random bytes has odds
// of about 2^-122. What they catch is a key made by hand: a repeated
// pattern ("abab..."), a counter, zeros with a byte changed.
const (
	maxKeyPeriod = KeySize / 2
	minKeyBytes  = 8
)

// weakKey says why key is not random enough, or returns "".
func weakKey(key []byte) string {
	for p := 1; p <= maxKeyPeriod; p++ {
		if bytes.Equal(key[p:], key[:len(key)-p]) {
			return fmt.Sprintf("repeats a pattern of %d bytes (%x)", p, key[:p])
		}
	}
	var seen [256]bool
	distinct := 0
	for _, b := range key {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	if distinct < minKeyBytes {
		return fmt.Sprintf("has only %d distinct byte values (a random key has about 30)", distinct)
	}
	return ""
}

// OpenPrivate opens a secret file (a key or a token file) for reading after
// checking it as LoadKey does: a regular file, mode rule, owner rule and
// directory rule. what names the file in errors ("key file").
func OpenPrivate(path, what string) (*os.File, error) {
	f, fi, err := openRegular(path, what)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		f.Close()
		return nil, &sentinelError{fmt.Sprintf("%s %s: rule mode: it is mode %#o; group and others must have no access (chmod 600)", what, path, perm), ErrKeyPermissions}
	}
	if err := checkOwnerAndDirs(path, fi, what); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// LoadKey reads the key file at path. It refuses a file that group or
// others may read or write (ErrKeyPermissions), one owned by another user
// (ErrKeyOwner), one in a directory others can write (ErrKeyDirectory), one
// that is not a regular file (ErrNotRegular), and contents DecodeKey
// rejects. The mode and owner are checked on the opened file, so the file
// checked is the file read.
func LoadKey(path string) ([]byte, error) {
	f, err := OpenPrivate(path, "key file")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("key file %s: rule value: %w: more than %d bytes", path, ErrTooLarge, maxKeyFile)
	}
	key, err := DecodeKey(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

// WriteKeyFile writes key to path as a key file with mode 0600. Without
// overwrite it fails with an error wrapping fs.ErrExist if path exists; with
// overwrite it replaces path atomically (a new file renamed over it), so the
// result is mode 0600 even if the old file was not.
func WriteKeyFile(path string, key []byte, overwrite bool) error {
	data := EncodeKey(key)
	if !overwrite {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("write key: %w", err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			os.Remove(path)
			return fmt.Errorf("write key %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			os.Remove(path)
			return fmt.Errorf("write key %s: %w", path, err)
		}
		return nil
	}
	// os.CreateTemp makes the file with mode 0600.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return nil
}

// openRegular opens path for reading and returns it with its FileInfo,
// taken from the open file. It refuses anything but a regular file
// (ErrNotRegular); O_NONBLOCK keeps a FIFO from blocking the open, and has
// no effect on a regular file. what names the file in errors.
func openRegular(path, what string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		rule := "rule regular file: it" // the secret files' rules
		if what == "config" {
			rule = "it"
		}
		return nil, nil, &sentinelError{fmt.Sprintf("%s %s: %s is not a regular file (%v)", what, path, rule, fi.Mode().Type()), ErrNotRegular}
	}
	return f, fi, nil
}

// Token files hold a bearer token (metrics_token_file): one line of
// MinToken..MaxToken visible ASCII characters, e.g. from
//
//	head -c 32 /dev/urandom | base64 > metrics.token
//
// checked as a key file is (OpenPrivate) and trimmed of white space.
const (
	MinToken = 16
	MaxToken = 1024
)

// LoadToken reads a token file. It refuses what OpenPrivate refuses and
// contents that are not one token (ErrTokenFormat).
func LoadToken(path string) ([]byte, error) {
	f, err := OpenPrivate(path, "token file")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("token file %s: rule value: %w: more than %d bytes", path, ErrTooLarge, maxKeyFile)
	}
	tok := bytes.TrimSpace(data)
	if len(tok) < MinToken || len(tok) > MaxToken {
		return nil, &sentinelError{fmt.Sprintf("token file %s: rule value: token is %d characters, want %d to %d", path, len(tok), MinToken, MaxToken), ErrTokenFormat}
	}
	for _, c := range tok {
		if c < 0x21 || c > 0x7e {
			return nil, &sentinelError{fmt.Sprintf("token file %s: rule value: token has %q; want one line of visible ASCII", path, c), ErrTokenFormat}
		}
	}
	if bytes.Count(tok, tok[:1]) == len(tok) {
		return nil, &sentinelError{fmt.Sprintf("token file %s: rule value: token is one character repeated, not a secret", path), ErrTokenFormat}
	}
	if why := weakToken(tok); why != "" {
		return nil, &sentinelError{fmt.Sprintf("token file %s: rule value: token %s, not a secret", path, why), ErrTokenFormat}
	}
	return tok, nil
}

// minTokenChars is the fewest distinct characters a token may have. A
// random 16-character hex token has fewer than 4 with odds of about 2^-29,
// a base64 one about 2^-55; a pattern repeated (a period of at most half
// the token) has odds of 16^-8 = 2^-32 for 16 hex characters, less for
// any longer or richer token.
const minTokenChars = 4

// weakToken says why tok was made by hand, not drawn at random, or
// returns "".
func weakToken(tok []byte) string {
	for p := 1; p <= len(tok)/2; p++ {
		if bytes.Equal(tok[p:], tok[:len(tok)-p]) {
			return fmt.Sprintf("repeats a pattern of %d characters", p)
		}
	}
	var seen [256]bool
	distinct := 0
	for _, c := range tok {
		if !seen[c] {
			seen[c] = true
			distinct++
		}
	}
	if distinct < minTokenChars {
		return fmt.Sprintf("has only %d distinct characters", distinct)
	}
	return ""
}
