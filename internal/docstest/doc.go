// Package docstest holds the tests that keep the repository's documentation true to what the
// components export: every metric and label a Markdown page names must be one that mdatagen's
// documentation.md says a component exports. It has no code of its own.
package docstest
