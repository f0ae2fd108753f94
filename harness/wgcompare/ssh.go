package wgcompare

import "fmt"

// SSHDConfig is the anchors' sshd_config: Debian's sshd listening on
// listen, root by key only (the host key and authorized_keys in dir, as
// ssh_host_ed25519_key and authorized_keys), aes256-ctr and hmac-sha2-256
// only, no compression, forwarding allowed: the ssh -L path's server end.
func SSHDConfig(listen, dir string) string {
	return fmt.Sprintf(`ListenAddress %[1]s
HostKey %[2]s/ssh_host_ed25519_key
PidFile none
PermitRootLogin prohibit-password
AuthorizedKeysFile %[2]s/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
Ciphers aes256-ctr
MACs hmac-sha2-256
Compression no
AllowTcpForwarding yes
`, listen, dir)
}
