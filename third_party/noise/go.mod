module github.com/flynn/noise

go 1.24.0

require (
	filippo.io/edwards25519 v1.2.0
	golang.org/x/crypto v0.58.0
)
