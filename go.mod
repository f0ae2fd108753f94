module github.com/offload-dev/offload

go 1.26.0

require (
	github.com/flynn/noise v1.1.0
	github.com/goccy/go-yaml v1.19.2
	github.com/hashicorp/yamux v0.1.2
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
	golang.org/x/crypto v0.58.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
)

// zap without http_handler.go (AtomicLevel.ServeHTTP, unused here): that file
// imports net/http, which links crypto/tls, x509, the NIST curves and ML-KEM
// into every binary (1.05 MB of 8.1 on linux/mipsle). third_party/zap/README.md.
replace go.uber.org/zap => ./third_party/zap

// flynn/noise with X25519 on filippo.io/edwards25519/field: x/crypto's
// curve25519 wraps crypto/ecdh, whose self-test links the NIST P-256 code
// (196,608 bytes on linux/mipsle). third_party/noise/README.md.
replace github.com/flynn/noise => ./third_party/noise
