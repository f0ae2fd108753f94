package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode is filtered by the umask; set it exactly.
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeyRoundTrip(t *testing.T) {
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != KeySize {
		t.Fatalf("GenerateKey: %d bytes", len(key))
	}
	key2, _ := GenerateKey()
	if bytes.Equal(key, key2) {
		t.Fatal("two keys are equal")
	}
	enc := EncodeKey(key)
	if len(enc) != 45 || enc[44] != '\n' || bytes.Count(enc, []byte("\n")) != 1 {
		t.Fatalf("EncodeKey = %q, want 44 base64 characters and a newline", enc)
	}
	p := filepath.Join(t.TempDir(), "k")
	if err := WriteKeyFile(p, key, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 || perm&0o600 != 0o600 {
		t.Fatalf("key file mode %#o, want 0600", perm)
	}
	got, err := LoadKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, key) {
		t.Fatal("LoadKey returned another key")
	}
}

func TestWriteKeyFileExisting(t *testing.T) {
	p := writeFile(t, "k", []byte("old\n"), 0o644)
	key, _ := GenerateKey()
	err := WriteKeyFile(p, key, false)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteKeyFile over existing file: %v, want fs.ErrExist", err)
	}
	if data, _ := os.ReadFile(p); string(data) != "old\n" {
		t.Fatalf("existing file changed to %q", data)
	}
	// With overwrite, the file is replaced and becomes private even though
	// the old one was 0644.
	if err := WriteKeyFile(p, key, true); err != nil {
		t.Fatal(err)
	}
	got, err := LoadKey(p)
	if err != nil {
		t.Fatalf("LoadKey after overwrite: %v", err)
	}
	if !bytes.Equal(got, key) {
		t.Fatal("overwritten file holds another key")
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*tmp*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

// testKey is a fixed key that is not one repeated byte.
func testKey() []byte {
	key := make([]byte, KeySize)
	for i := range key {
		key[i] = byte(i*37 + 11)
	}
	return key
}

func TestLoadKeyErrors(t *testing.T) {
	key := testKey()
	good := EncodeKey(key)
	tests := []struct {
		name    string
		data    []byte
		mode    os.FileMode
		want    error
		message string // a substring of the message
	}{
		{"0644", good, 0o644, ErrKeyPermissions, "rule mode: it is mode 0644; group and others must have no access (chmod 600)"},
		{"0640", good, 0o640, ErrKeyPermissions, "is mode 0640"},
		{"0604", good, 0o604, ErrKeyPermissions, "is mode 0604"},
		{"0620", good, 0o620, ErrKeyPermissions, "is mode 0620"},
		{"short", EncodeKey(key[:16]), 0o600, ErrKeyLength, "key is 16 bytes, want 32"},
		{"long", EncodeKey(append(key, 1)), 0o600, ErrKeyLength, "key is 33 bytes, want 32"},
		{"empty", nil, 0o600, ErrKeyLength, "key is 0 bytes"},
		{"garbage", []byte("this is not a key!\n"), 0o600, ErrKeyFormat, "not a base64 key"},
		{"two lines", append(append([]byte{}, good...), good...), 0o600, ErrKeyFormat, "not a base64 key"},
		{"url base64", []byte(strings.Repeat("-_", 22) + "\n"), 0o600, ErrKeyFormat, "not a base64 key"},
		{"huge", bytes.Repeat([]byte("A"), maxKeyFile+1), 0o600, ErrTooLarge, "more than"},
		{"all zero", EncodeKey(make([]byte, KeySize)), 0o600, ErrKeyWeak, "rule value: key is 32 bytes of 0x00, not a secret"},
		{"all 0xff", EncodeKey(bytes.Repeat([]byte{0xff}, KeySize)), 0o600, ErrKeyWeak, "rule value: key is 32 bytes of 0xff"},
		{"all 7", EncodeKey(bytes.Repeat([]byte{7}, KeySize)), 0o600, ErrKeyWeak, "rule value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, "k", tt.data, tt.mode)
			_, err := LoadKey(p)
			if !errors.Is(err, tt.want) {
				t.Fatalf("LoadKey: %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("LoadKey: %q does not say %q", err, tt.message)
			}
		})
	}
}

func TestLoadKeyAccepts(t *testing.T) {
	key := testKey()
	enc := base64.StdEncoding.EncodeToString(key)
	for _, tt := range []struct {
		name string
		data string
		mode os.FileMode
	}{
		{"0600", enc + "\n", 0o600},
		{"0400", enc + "\n", 0o400},
		{"no newline", enc, 0o600},
		{"crlf and spaces", "  " + enc + "\r\n", 0o600},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadKey(writeFile(t, "k", []byte(tt.data), tt.mode))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, key) {
				t.Fatal("wrong key")
			}
		})
	}
}

func TestLoadKeyNotAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(dir); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("LoadKey(dir): %v, want ErrNotRegular", err)
	}
	if _, err := LoadKey(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadKey(missing): %v, want fs.ErrNotExist", err)
	}
}

func TestLoadToken(t *testing.T) {
	good := "c2VjcmV0LXRva2VuLWZvci10ZXN0cw=="
	for _, tc := range []struct {
		name string
		data string
		mode os.FileMode
		want error // nil: accepted
	}{
		{"good", good + "\n", 0o600, nil},
		{"spaces around", "  " + good + "\r\n", 0o400, nil},
		{"open mode", good, 0o644, ErrKeyPermissions},
		{"short", "abc123\n", 0o600, ErrTokenFormat},
		{"long", strings.Repeat("ab", MaxToken), 0o600, ErrTokenFormat},
		{"space inside", "secret token for tests\n", 0o600, ErrTokenFormat},
		{"two lines", good + "\n" + good + "\n", 0o600, ErrTokenFormat},
		{"one character", strings.Repeat("x", 32), 0o600, ErrTokenFormat},
		{"two characters", strings.Repeat("ab", 16), 0o600, ErrTokenFormat},
		{"a word repeated", strings.Repeat("password", 4), 0o600, ErrTokenFormat},
		{"three characters", "aaaaaaaaaabbbbbbbbbcccc", 0o600, ErrTokenFormat},
		{"empty", "", 0o600, ErrTokenFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := LoadToken(writeFile(t, "t", []byte(tc.data), tc.mode))
			if tc.want == nil {
				if err != nil || string(tok) != good {
					t.Fatalf("LoadToken = %q, %v", tok, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("LoadToken: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "token file") {
				t.Errorf("%q does not name the token file", err)
			}
		})
	}
}

// TestLoadKeyWeak: keys made by hand, not by keygen, are refused with the
// value rule; random keys are not.
func TestLoadKeyWeak(t *testing.T) {
	rep := func(pat []byte) []byte { return bytes.Repeat(pat, KeySize/len(pat)+1)[:KeySize] }
	zerosAndOne := make([]byte, KeySize)
	zerosAndOne[KeySize-1] = 1
	counter := make([]byte, KeySize)
	for i := range counter {
		counter[i] = byte(i / 5) // 0 0 0 0 0 1 1 ... 6 6
	}
	for _, tt := range []struct {
		name string
		key  []byte
		says string
	}{
		{"2-byte pattern", rep([]byte("ab")), "repeats a pattern of 2 bytes (6162)"},
		{"3-byte pattern", rep([]byte{1, 2, 3}), "repeats a pattern of 3 bytes"},
		{"16-byte pattern", rep([]byte("0123456789abcdef")), "repeats a pattern of 16 bytes"},
		{"zeros and a one", zerosAndOne, "only 2 distinct byte values"},
		{"7 values", counter, "only 7 distinct byte values"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadKey(writeFile(t, "k", EncodeKey(tt.key), 0o600))
			if !errors.Is(err, ErrKeyWeak) {
				t.Fatalf("LoadKey: %v, want ErrKeyWeak", err)
			}
			for _, want := range []string{"rule value", tt.says} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
	for i := 0; i < 1000; i++ {
		key, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeKey(EncodeKey(key)); err != nil {
			t.Fatalf("random key %x: %v", key, err)
		}
	}
}

// TestLoadKeyRefusalsNameRule: every refusal of a key's contents or kind
// says which rule failed.
func TestLoadKeyRefusalsNameRule(t *testing.T) {
	key := testKey()
	for _, tt := range []struct {
		name, rule string
		data       []byte
	}{
		{"short", "rule value", EncodeKey(key[:16])},
		{"garbage", "rule value", []byte("not a key\n")},
		{"huge", "rule value", bytes.Repeat([]byte("A"), maxKeyFile+1)},
	} {
		if _, err := LoadKey(writeFile(t, "k", tt.data, 0o600)); err == nil || !strings.Contains(err.Error(), tt.rule) {
			t.Errorf("%s: %v does not say %q", tt.name, err, tt.rule)
		}
	}
	if _, err := LoadKey(t.TempDir()); err == nil || !strings.Contains(err.Error(), "rule regular file") {
		t.Errorf("directory: %v does not say %q", err, "rule regular file")
	}
}
