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

require go.uber.org/multierr v1.10.0 // indirect
