// Package treecheck holds checks on the repository itself, which go test
// ./... runs with the rest: what git tracks must be source, so that a
// fresh clone builds and tests from source alone, and every command's
// `go build` output must be ignored, so that none is committed by
// accident (a 10 MB cmd/offload/offload once was). It has no code.
package treecheck
