package control

// uidAllowed: root, or the end's own user.
func uidAllowed(peer, self uint32) bool { return peer == 0 || peer == self }
