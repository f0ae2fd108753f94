// Package control is an end's local control socket: `offload status` asks
// a running server or client for its live view through it with no setting,
// as `wg show` asks wireguard-go through its UAPI socket. It knows no
// tunnel: the caller hands it the answers (Handlers), so the status a
// socket serves is the one the metrics listener's /status serves.
//
// Where (DefaultPath): $RUNTIME_DIRECTORY/NAME.sock when set (systemd's
// RuntimeDirectory=offload: /run/offload); else /var/run/offload/NAME.sock
// for root; else $XDG_RUNTIME_DIR/offload/NAME.sock, or
// $TMPDIR/offload-UID/NAME.sock, in a directory of mode 0700.
//
// Who: the socket is made mode 0600 (under umask 0177, so it is never
// open to others, not even between bind and chmod) and owned by the end's
// user: only that user and root can connect. On Linux each connection's
// peer is checked again (SO_PEERCRED): root or the end's uid, else it is
// closed unanswered.
//
// One end per socket: Listen finds a socket file already there and
// connects to it. Refused (no process behind it: the end that made it was
// killed) means stale: it is removed and replaced. Answered means another
// end runs with it: Listen fails with ErrInUse, naming the path.
//
// Wire: one request per connection, a text line; the answer, then close.
//
//	request:  COMMAND "\n"              COMMAND is "status"; at most 64 bytes
//	answer:   "ok\n" BODY               BODY: the command's JSON, up to the close
//	      or: "error " MESSAGE "\n"     unknown command, or why it failed
//
// A peer has ioTimeout to send its line and read the answer; at most
// maxConns connections are served at once (the next wait in the backlog).
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	ioTimeout  = 10 * time.Second
	maxLine    = 64
	maxConns   = 4
	maxAnswer  = 16 << 20 // what Ask reads at most
	systemDir  = "/var/run/offload"
	socketMode = 0o600
)

// ErrInUse means another running end serves the socket.
var ErrInUse = errors.New("in use by a running offload end")

// Handler answers a command with a value to send as JSON.
type Handler func() (any, error)

// DefaultPath is the socket of the end called name (a file name, no
// slash) for this process's user; see the package comment.
func DefaultPath(name string) string {
	return filepath.Join(defaultDir(), name+".sock")
}

func defaultDir() string {
	if d := os.Getenv("RUNTIME_DIRECTORY"); d != "" {
		// systemd may list several, separated by colons.
		return strings.Split(d, ":")[0]
	}
	if os.Geteuid() == 0 {
		return systemDir
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "offload")
	}
	return filepath.Join(os.TempDir(), "offload-"+strconv.Itoa(os.Geteuid()))
}

// Listener is a control socket: Serve answers on it, Close removes it.
type Listener struct {
	ln   *net.UnixListener
	path string
}

// Path is the socket's file.
func (l *Listener) Path() string { return l.path }

// Close stops accepting and removes the socket file.
func (l *Listener) Close() error { return l.ln.Close() }

// Listen makes the control socket at path: its directory if missing
// (0755 for /var/run/offload, else 0700), a stale socket replaced, a live
// one refused with ErrInUse.
func Listen(path string) (*Listener, error) {
	dir := filepath.Dir(path)
	mode := os.FileMode(0o700)
	if dir == systemDir {
		mode = 0o755
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := checkDir(dir); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	err := clearStale(path)
	if err != nil {
		return nil, err
	}
	var ln *net.UnixListener
	withUmask(0o177, func() { ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"}) })
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &Listener{ln: ln, path: path}, nil
}

// checkDir refuses a directory others could swap the socket in: one
// that is not a directory of this user or root (a symlink, another
// user's $TMPDIR/offload-UID made first), or that others may write.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink?)", dir)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("%s is writable by others (mode %v)", dir, fi.Mode().Perm())
	}
	return checkOwner(fi)
}

// clearStale removes a socket at path that no process serves, and refuses
// one that a process does.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("control socket %s: a file that is not a socket is there; remove it or set control: to another path", path)
	}
	c, err := net.DialTimeout("unix", path, ioTimeout)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("control socket %s: %w (the same config started twice?); stop that end, or set control: to another path", path, ErrInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("control socket %s: removing a stale one: %w", path, err)
	}
	return nil
}

// Serve answers the commands of handlers on l until ctx ends, then closes
// l (which removes the socket) and returns once every answer is sent.
func Serve(ctx context.Context, l *Listener, handlers map[string]Handler) error {
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, maxConns)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := l.ln.AcceptUnix()
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("control socket: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer c.Close()
			if !peerAllowed(c) {
				return
			}
			_ = c.SetDeadline(time.Now().Add(ioTimeout))
			answer(c, handlers)
		}()
	}
}

// answer reads one command from c and writes its answer.
func answer(c io.ReadWriter, handlers map[string]Handler) {
	line, err := bufio.NewReaderSize(io.LimitReader(c, maxLine+1), maxLine+1).ReadString('\n')
	if err != nil {
		_, _ = io.WriteString(c, "error want one command line of at most "+strconv.Itoa(maxLine)+" bytes\n")
		return
	}
	cmd := strings.TrimSpace(line)
	h := handlers[cmd]
	if h == nil {
		_, _ = fmt.Fprintf(c, "error unknown command %q\n", cmd)
		return
	}
	v, err := h()
	if err != nil {
		_, _ = fmt.Fprintf(c, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	body, err := json.Marshal(v)
	if err != nil {
		_, _ = fmt.Fprintf(c, "error %s\n", err)
		return
	}
	_, _ = c.Write(append([]byte("ok\n"), body...))
}

// Ask sends command to the socket at path and returns the answer's body.
func Ask(ctx context.Context, path, command string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// A peer the end does not allow is closed unanswered: the write or
	// the read fails, whichever meets the close.
	noAnswer := func(err error) error {
		return fmt.Errorf("control socket %s: no answer (%w); only root and the end's own user may ask", path, err)
	}
	if _, err := io.WriteString(c, command+"\n"); err != nil {
		return nil, noAnswer(err)
	}
	r := bufio.NewReader(io.LimitReader(c, maxAnswer))
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, noAnswer(err)
	}
	head = strings.TrimSuffix(head, "\n")
	if msg, ok := strings.CutPrefix(head, "error "); ok {
		return nil, fmt.Errorf("control socket %s: %s", path, msg)
	}
	if head != "ok" {
		return nil, fmt.Errorf("control socket %s: not an offload control socket (answered %q)", path, head)
	}
	return io.ReadAll(r)
}
