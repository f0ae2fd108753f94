// Package treecheck holds checks on the repository itself, which go test
// ./... runs with the rest: what git tracks must be source, so that a
// fresh clone builds and tests from source alone, and every command's
// `go build` output must be ignored, so that none is committed by
// accident (a 10 MB cmd/offload/offload once was); and each package
// imports only what docs/architecture.md says it may (imports_test.go,
// TestImportRules), so that the import rules are enforced, not prose. It
// has no code.
package treecheck
