module github.com/offload-dev/offload

go 1.26.0

require (
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.50.0
)

require go.uber.org/multierr v1.10.0 // indirect
