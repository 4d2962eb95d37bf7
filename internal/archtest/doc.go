// Package archtest holds the test of the architecture's rules: the import
// rules table of docs/architecture.md, checked against the import graph
// (go list), and a doc comment on every package. It has no code of its
// own; testdata/broken is a module that breaks the rules on purpose, to
// show the test can fail.
package archtest
