// Package fuzz holds the fuzz targets of the API's validation. They live apart from the
// API package's tests, which start a control plane: the fuzzer instruments everything a
// test binary links, and this binary links the API types only, so a bounded fuzz run in
// `make test` does not first rebuild the control plane's client libraries.
package fuzz
